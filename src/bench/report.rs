//! The figures of one `sluice bench` run: counts, rate and latency percentiles, as text or JSON.

use std::time::Duration;

use hdrhistogram::Histogram;

/// What one run measured.
#[derive(Debug, Clone)]
pub struct Report {
    /// Calls completed (ok + over_limit + errors).
    pub calls: u64,
    /// Calls answered OK.
    pub ok: u64,
    /// Calls answered OVER_LIMIT.
    pub over_limit: u64,
    /// Calls that failed (gRPC error, or an overall code other than OK / OVER_LIMIT).
    pub errors: u64,
    /// From the first call sent to the last answer.
    pub elapsed: Duration,
    /// Latency in nanoseconds: from the send (closed loop) or the intended send time (open loop).
    pub latency: Histogram<u64>,
    /// The first error seen, for the diagnosis of a run with errors.
    pub first_error: Option<String>,
    /// The machine's 1-minute load average before and after the run (Linux only).
    pub load: Option<(f64, f64)>,
}

/// The load average under which a machine counts as quiet: timing figures taken above it
/// measure the other work on the machine as much as the server.
pub const QUIET_LOAD: f64 = 1.0;

/// The 1-minute load average (`/proc/loadavg`), where the system has one.
pub fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

impl Report {
    /// Completed calls per second.
    pub fn calls_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.calls as f64 / secs
        } else {
            0.0
        }
    }

    /// The latency at `quantile` (0..=1) in microseconds (0 when nothing was recorded).
    pub fn latency_us(&self, quantile: f64) -> f64 {
        if self.latency.is_empty() {
            return 0.0;
        }
        self.latency.value_at_quantile(quantile) as f64 / 1_000.0
    }

    fn max_us(&self) -> f64 {
        self.latency.max() as f64 / 1_000.0
    }

    /// Whether the machine was quiet (load average under [`QUIET_LOAD`]) before and after the
    /// run; `None` where the load average cannot be read.
    pub fn quiet(&self) -> Option<bool> {
        self.load.map(|(a, b)| a < QUIET_LOAD && b < QUIET_LOAD)
    }

    /// `{"calls","ok","over_limit","errors","calls_per_sec","latency_us":{"p50","p90","p99","p999","max"},
    /// "load_before","load_after","quiet"}`, keys in that order (the load figures `null` where
    /// unknown).
    pub fn json(&self) -> String {
        let [p50, p90, p99, p999, max] = self.percentiles();
        let (calls, ok, over_limit, errors) = (self.calls, self.ok, self.over_limit, self.errors);
        let per_sec = self.calls_per_sec();
        let (before, after) = match self.load {
            Some((a, b)) => (format!("{a:.2}"), format!("{b:.2}")),
            None => ("null".into(), "null".into()),
        };
        let quiet = self
            .quiet()
            .map_or("null", |q| if q { "true" } else { "false" });
        format!(
            r#"{{"calls":{calls},"ok":{ok},"over_limit":{over_limit},"errors":{errors},"calls_per_sec":{per_sec:.1},"latency_us":{{"p50":{p50:.1},"p90":{p90:.1},"p99":{p99:.1},"p999":{p999:.1},"max":{max:.1}}},"load_before":{before},"load_after":{after},"quiet":{quiet}}}"#
        )
    }

    /// p50, p90, p99, p99.9 and the maximum latency, in microseconds.
    fn percentiles(&self) -> [f64; 5] {
        [
            self.latency_us(0.5),
            self.latency_us(0.9),
            self.latency_us(0.99),
            self.latency_us(0.999),
            self.max_us(),
        ]
    }

    /// A few lines for people.
    pub fn text(&self) -> String {
        let [p50, p90, p99, p999, max] = self.percentiles();
        let (calls, ok, over_limit, errors) = (self.calls, self.ok, self.over_limit, self.errors);
        let (seconds, per_sec) = (self.elapsed.as_secs_f64(), self.calls_per_sec());
        let load = match (self.load, self.quiet()) {
            (Some((a, b)), Some(true)) => format!("load average {a:.2} before, {b:.2} after\n"),
            (Some((a, b)), _) => format!(
                "load average {a:.2} before, {b:.2} after: the machine was NOT quiet \
                 (>= {QUIET_LOAD}); timing figures include other work\n"
            ),
            (None, _) => String::new(),
        };
        format!(
            "calls {calls}  ok {ok}  over_limit {over_limit}  errors {errors}  in {seconds:.2}s\n\
             calls/s {per_sec:.1}\n\
             latency us  p50 {p50:.1}  p90 {p90:.1}  p99 {p99:.1}  p99.9 {p999:.1}  max {max:.1}\n{load}"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON has exactly the documented keys, in order, and parses.
    #[test]
    fn json_shape() {
        let mut latency = Histogram::new(3).unwrap();
        latency.record(250_000).unwrap();
        let report = Report {
            calls: 4,
            ok: 3,
            over_limit: 1,
            errors: 0,
            elapsed: Duration::from_secs(2),
            latency,
            first_error: None,
            load: Some((0.5, 1.5)),
        };
        let text = report.json();
        assert!(
            text.starts_with(r#"{"calls":4,"ok":3,"over_limit":1,"errors":0,"calls_per_sec":2.0,"latency_us":{"p50":250."#),
            "{text}"
        );
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&String> = doc["latency_us"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 5);
        assert!(doc["latency_us"]["max"].as_f64().unwrap() >= 250.0);
        assert_eq!(doc["load_before"], 0.5);
        assert_eq!(doc["quiet"], false, "1.5 after the run is not quiet");
        assert!(report.text().contains("NOT quiet"));
    }
}
