//! `sluice serve` flags of the xDS rule source: `--xds-server` and the settings that go with it.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use clap::builder::TypedValueParser;
use sluice::app::{Backoff, XdsSettings, XdsTls, defaults};
use sluice::clock::duration::{self, DurationError, GoDuration};

/// Rules from an xDS control plane (state of the world, ADS) instead of rule files.
#[derive(Debug, Args)]
pub struct XdsArgs {
    /// Take rules from this xDS control plane, HOST:PORT (e.g. envoy-gateway:18001), instead
    /// of --config: each accepted response replaces the whole rule set.
    #[arg(long, env = "SLUICE_XDS_SERVER", conflicts_with = "config")]
    pub xds_server: Option<String>,
    /// The node id sent to the control plane (Envoy Gateway serves `envoy-ratelimit`).
    #[arg(long, env = "SLUICE_XDS_NODE_ID", default_value = defaults::XDS_NODE_ID)]
    pub xds_node_id: String,
    /// Node metadata, KEY=VALUE (repeatable, or comma-separated).
    #[arg(long, env = "SLUICE_XDS_NODE_METADATA", value_delimiter = ',', value_parser = key_value)]
    pub xds_node_metadata: Vec<(String, String)>,
    /// A gRPC header sent on the stream, NAME=VALUE (repeatable; e.g. authorization=Bearer ...).
    #[arg(long, env = "SLUICE_XDS_HEADER", value_parser = key_value, hide_env_values = true)]
    pub xds_header: Vec<(String, String)>,
    /// Connect with TLS (implied by the other --xds-tls-* flags). The server certificate is
    /// checked against the system's roots plus --xds-tls-ca.
    #[arg(long, env = "SLUICE_XDS_TLS")]
    pub xds_tls: bool,
    /// PEM client certificate for mutual TLS (with --xds-tls-key).
    #[arg(long, env = "SLUICE_XDS_TLS_CERT", requires = "xds_tls_key")]
    pub xds_tls_cert: Option<PathBuf>,
    /// PEM private key of --xds-tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "SLUICE_XDS_TLS_KEY", requires = "xds_tls_cert")]
    pub xds_tls_key: Option<PathBuf>,
    /// PEM CA certificates to trust besides the system's roots.
    #[arg(long, env = "SLUICE_XDS_TLS_CA")]
    pub xds_tls_ca: Option<PathBuf>,
    /// The name the server certificate must carry, instead of the host of --xds-server.
    #[arg(long, env = "SLUICE_XDS_TLS_SERVER_NAME")]
    pub xds_tls_server_name: Option<String>,
    /// The largest response accepted, in bytes.
    #[arg(long, env = "SLUICE_XDS_MAX_MESSAGE_SIZE", default_value_t = defaults::XDS_MAX_MESSAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..).map(|n| n as usize))]
    pub xds_max_message_size: usize,
    /// The first pause before reconnecting (doubled per failed attempt).
    #[arg(long, env = "SLUICE_XDS_BACKOFF_INITIAL", default_value_t = GoDuration(defaults::XDS_BACKOFF_INITIAL), value_parser = pause)]
    pub xds_backoff_initial: GoDuration,
    /// The longest pause before reconnecting.
    #[arg(long, env = "SLUICE_XDS_BACKOFF_MAX", default_value_t = GoDuration(defaults::XDS_BACKOFF_MAX), value_parser = pause)]
    pub xds_backoff_max: GoDuration,
    /// How far below its nominal length a jittered pause may fall, 0 to 1.
    #[arg(long, env = "SLUICE_XDS_BACKOFF_RANDOM_FACTOR", default_value_t = defaults::XDS_BACKOFF_RANDOM_FACTOR, value_parser = fraction)]
    pub xds_backoff_random_factor: f64,
    /// Do not randomise reconnection pauses.
    #[arg(long, env = "SLUICE_XDS_BACKOFF_NO_JITTER")]
    pub xds_backoff_no_jitter: bool,
    /// Serve before the first rules arrive: calls on unknown domains answer OK meanwhile and
    /// health reports serving. Without it, calls fail UNAVAILABLE and health reports not
    /// serving until the first rule set is accepted.
    #[arg(long, env = "SLUICE_XDS_FORCE_START")]
    pub xds_force_start: bool,
}

impl XdsArgs {
    /// The xDS settings, or `None` without `--xds-server`.
    pub fn settings(&self) -> Option<XdsSettings> {
        let server = self.xds_server.clone()?;
        Some(XdsSettings {
            node_id: self.xds_node_id.clone(),
            node_metadata: self.xds_node_metadata.clone(),
            headers: self.xds_header.clone(),
            tls: self.tls(),
            max_message_size: self.xds_max_message_size,
            backoff: Backoff {
                initial: self.xds_backoff_initial.into(),
                max: self.xds_backoff_max.into(),
                random_factor: self.xds_backoff_random_factor,
                jitter: !self.xds_backoff_no_jitter,
            },
            force_start: self.xds_force_start,
            ..XdsSettings::new(server)
        })
    }

    fn tls(&self) -> Option<XdsTls> {
        let tls = XdsTls {
            cert: self.xds_tls_cert.clone(),
            key: self.xds_tls_key.clone(),
            ca: self.xds_tls_ca.clone(),
            server_name: self.xds_tls_server_name.clone(),
        };
        (self.xds_tls || tls != XdsTls::default()).then_some(tls)
    }
}

/// `KEY=VALUE`, split at the first `=`; the key must not be empty.
fn key_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not KEY=VALUE")),
    }
}

fn pause(text: &str) -> Result<GoDuration, DurationError> {
    duration::parse_in(text, Duration::from_millis(1)..=Duration::from_secs(3_600)).map(GoDuration)
}

fn fraction(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("'{text}' is not a number between 0 and 1")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn xds(args: &[&str]) -> Result<Option<XdsSettings>, clap::Error> {
        let argv = ["sluice", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(serve) => Ok(serve.settings().xds),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// Without --xds-server rules come from files; with it, the defaults are envoyproxy/ratelimit's
    /// node id, plaintext, 4 MiB and the documented backoff.
    #[test]
    fn server_turns_xds_on() {
        assert_eq!(xds(&[]).unwrap(), None);
        let settings = xds(&["--xds-server", "cp:18000"]).unwrap().expect("xds");
        assert_eq!(settings, XdsSettings::new("cp:18000"));
        assert_eq!(settings.node_id, "default");
        assert!(settings.tls.is_none() && !settings.force_start);
    }

    /// Every flag reaches the settings; any TLS file flag turns TLS on.
    #[test]
    fn flags_reach_the_settings() {
        let settings = xds(&[
            "--xds-server=envoy-gateway:18001",
            "--xds-node-id=envoy-ratelimit",
            "--xds-node-metadata=zone=a,rack=b=c",
            "--xds-header=authorization=Bearer t",
            "--xds-header=x-team=rl",
            "--xds-tls-ca=/certs/ca.crt",
            "--xds-max-message-size=1024",
            "--xds-backoff-initial=250ms",
            "--xds-backoff-max=1m",
            "--xds-backoff-random-factor=0",
            "--xds-backoff-no-jitter",
            "--xds-force-start",
        ])
        .unwrap()
        .expect("xds");
        let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
            p.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            settings.node_metadata,
            pairs(&[("zone", "a"), ("rack", "b=c")])
        );
        assert_eq!(
            settings.headers,
            pairs(&[("authorization", "Bearer t"), ("x-team", "rl")])
        );
        assert_eq!(
            settings.tls.unwrap().ca,
            Some(PathBuf::from("/certs/ca.crt"))
        );
        assert_eq!(settings.max_message_size, 1024);
        let expected = Backoff {
            initial: Duration::from_millis(250),
            max: Duration::from_secs(60),
            random_factor: 0.0,
            jitter: false,
        };
        assert_eq!(settings.backoff, expected);
        assert!(settings.force_start);
    }

    /// Malformed values and contradictory flags are errors.
    #[test]
    fn bad_flags() {
        for args in [
            &["--xds-server=h:1", "--xds-node-metadata=novalue"][..],
            &["--xds-server=h:1", "--xds-header==v"],
            &["--xds-server=h:1", "--xds-backoff-random-factor=1.5"],
            &["--xds-server=h:1", "--xds-backoff-initial=0s"],
            &["--xds-server=h:1", "--xds-max-message-size=0"],
            &["--xds-server=h:1", "--xds-tls-cert=/c"],
            &["--xds-server=h:1", "--config=rules/"],
        ] {
            assert!(xds(args).is_err(), "{args:?}");
        }
    }
}
