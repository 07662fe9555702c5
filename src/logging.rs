//! Logging set-up for `serve`: sluice's text or JSON lines, or JSON lines with
//! envoyproxy/ratelimit's keys (`@timestamp`, `level`, `@message`, then the event's fields), as
//! its `LOG_FORMAT=json` writes them. Logs go to stderr through a lossy background writer, so a
//! stalled, closed or broken stderr never blocks or fails a call, a signal or the shutdown.

use std::fmt;
use std::io::{self, IsTerminal, Write};

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::cli::LogFormat;

/// Installs the global subscriber: `level` is a filter (`info`, `sluice=debug`); without one,
/// `RUST_LOG`, else `info`. Keep the guard until the process ends: dropping it sends the lines
/// still queued (waiting at most about a second for a stalled stderr).
pub fn init(format: LogFormat, level: Option<&str>) -> WorkerGuard {
    let filter = match level {
        Some(level) => EnvFilter::new(level),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    // Events are queued for a writer thread and dropped when the queue is full, so a log
    // shipper that stops reading stalls nothing but the logs.
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .thread_name("sluice-log")
        .finish(ForgivingStderr);
    // Colour only for a person at a terminal; log collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(io::stderr().is_terminal())
        // The subscriber would report a failed write on stderr itself, which panics when stderr
        // is the broken pipe; writes cannot fail here anyway (see `ForgivingStderr`).
        .log_internal_errors(false)
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
        LogFormat::UpstreamJson => builder.event_format(CompatJson).init(),
    }
    guard
}

/// stderr whose failures are dropped lines, not errors: once a log reader has gone (`EPIPE`) or
/// stderr is closed, there is nowhere left to report it, and the server must go on serving.
struct ForgivingStderr;

impl Write for ForgivingStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}

/// One JSON object per event, keyed as logrus's JSON formatter is configured envoyproxy/ratelimit.
struct CompatJson;

impl<S, N> FormatEvent<S, N> for CompatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = JsonFields(Map::new());
        event.record(&mut fields);
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let message = fields.0.remove("message").unwrap_or(Value::Null);
        let mut line = Map::new();
        line.insert("@timestamp".into(), Value::String(timestamp));
        line.insert(
            "level".into(),
            logrus_level(event.metadata().level()).into(),
        );
        line.insert("@message".into(), message);
        line.extend(fields.0);
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// logrus's name of a level.
fn logrus_level(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "error",
        Level::WARN => "warning",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// An event's fields as JSON values.
struct JsonFields(Map<String, Value>);

impl Visit for JsonFields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}
