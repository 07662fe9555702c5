//! `sluice serve` flags of the statsd sink (off unless `--statsd-addr` is given).

use clap::{Args, ValueEnum};
use sluice::app::{Mogrifier, StatsdFormat, StatsdProtocol, StatsdSettings, defaults};
use sluice::clock::duration::{self, DurationError, GoDuration};

/// envoyproxy/ratelimit's stats sent to a statsd or DogStatsD receiver.
#[derive(Debug, Args)]
pub struct StatsdArgs {
    /// Send envoyproxy/ratelimit's stats (`ratelimit.service.rate_limit.<domain>.<key>.total_hits`
    /// …) to this statsd receiver, HOST:PORT; unset: no sink. A receiver that is absent costs
    /// nothing on calls (counted in sluice_statsd_send_errors_total).
    #[arg(long, env = "SLUICE_STATSD_ADDR", value_parser = parse_host_port)]
    pub statsd_addr: Option<String>,
    /// UDP datagrams (at most 1432 bytes) or a TCP stream (reconnected quietly).
    #[arg(long, env = "SLUICE_STATSD_PROTOCOL", value_enum, default_value_t = StatsdProtocolArg::Udp)]
    pub statsd_protocol: StatsdProtocolArg,
    /// Plain statsd (tags as `.__k=v` name suffixes, as gostats) or DogStatsD (`|#k:v`).
    #[arg(long, env = "SLUICE_STATSD_FORMAT", value_enum, default_value_t = FormatArg::Statsd)]
    pub statsd_format: FormatArg,
    /// Tags on every stat, `k=v,k2=v2` (envoyproxy/ratelimit EXTRA_TAGS).
    #[arg(long, env = "SLUICE_STATSD_TAGS", value_parser = parse_tag, value_delimiter = ',')]
    pub statsd_tags: Vec<(String, String)>,
    /// How often what changed is sent (e.g. 10s, 500ms).
    #[arg(long, env = "SLUICE_STATSD_FLUSH_INTERVAL", default_value_t = GoDuration(defaults::STATSD_FLUSH_INTERVAL), value_parser = parse_flush_interval)]
    pub statsd_flush_interval: GoDuration,
    /// A statsd_exporter mapping file (envoyproxy/ratelimit PROMETHEUS_MAPPER_YAML): applied to the
    /// statsd names, it makes the `ratelimit_service_*` families on /metrics instead of the
    /// built-in ones; an invalid file stops the start with its line and column.
    #[arg(long, env = "SLUICE_PROMETHEUS_MAPPER")]
    pub prometheus_mapper: Option<std::path::PathBuf>,
    /// DogStatsD mogrifiers, from the `ratelimit` personality's variables only.
    #[arg(skip)]
    pub mogrifiers: Vec<Mogrifier>,
}

/// `--statsd-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsdProtocolArg {
    /// Datagrams.
    Udp,
    /// A stream.
    Tcp,
}

/// `--statsd-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// `name.__tag=value:1|c`.
    Statsd,
    /// `name:1|c|#tag:value`.
    Dogstatsd,
}

impl StatsdArgs {
    /// The sink's settings, or `None` without `--statsd-addr`.
    pub fn settings(&self) -> Option<StatsdSettings> {
        let addr = self.statsd_addr.clone()?;
        Some(StatsdSettings {
            protocol: match self.statsd_protocol {
                StatsdProtocolArg::Udp => StatsdProtocol::Udp,
                StatsdProtocolArg::Tcp => StatsdProtocol::Tcp,
            },
            format: match self.statsd_format {
                FormatArg::Statsd => StatsdFormat::Statsd,
                FormatArg::Dogstatsd => StatsdFormat::DogStatsd,
            },
            tags: self.statsd_tags.clone(),
            flush_interval: self.statsd_flush_interval.0,
            mogrifiers: self.mogrifiers.clone(),
            ..StatsdSettings::new(addr)
        })
    }
}

/// `HOST:PORT` with a port number (the host is resolved when the sink connects).
pub fn parse_host_port(text: &str) -> Result<String, String> {
    match text.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
            Ok(text.to_owned())
        }
        _ => Err(format!("'{text}' is not HOST:PORT")),
    }
}

fn parse_tag(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() && !value.is_empty() => {
            Ok((key.to_owned(), value.to_owned()))
        }
        _ => Err(format!("'{text}' is not key=value")),
    }
}

fn parse_flush_interval(text: &str) -> Result<GoDuration, DurationError> {
    duration::parse_in(
        text,
        std::time::Duration::from_millis(10)..=std::time::Duration::from_secs(3_600),
    )
    .map(GoDuration)
}
