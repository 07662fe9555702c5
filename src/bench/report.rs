//! The figures of one `sluice bench` run: counts, rate and latency percentiles, as text or JSON.

use std::time::Duration;

use hdrhistogram::Histogram;

use super::machine::QUIET_OTHER_CORES;

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
    /// Other work during the run, in cores: the machine's CPU time less this load generator's
    /// and the `--server-pid` processes' (Linux only; `machine.rs`).
    pub other_cores: Option<f64>,
}

/// The load average under which a machine counts as quiet, where other work cannot be
/// measured: timing figures taken above it measure the other work as much as the server.
pub const QUIET_LOAD: f64 = 1.0;

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

    /// Whether the machine was quiet: other work under [`QUIET_OTHER_CORES`] during the run, or
    /// where that cannot be measured, a load average under [`QUIET_LOAD`] before and after it;
    /// `None` where neither can be read.
    pub fn quiet(&self) -> Option<bool> {
        match self.other_cores {
            Some(cores) => Some(cores < QUIET_OTHER_CORES),
            None => self.load.map(|(a, b)| a < QUIET_LOAD && b < QUIET_LOAD),
        }
    }

    /// `{"calls","ok","over_limit","errors","calls_per_sec","latency_us":{"p50","p90","p99","p999","max"},
    /// "load_before","load_after","other_cores","quiet"}`, keys in that order (the load and
    /// other-work figures `null` where unknown).
    pub fn json(&self) -> String {
        let [p50, p90, p99, p999, max] = self.percentiles();
        let (calls, ok, over_limit, errors) = (self.calls, self.ok, self.over_limit, self.errors);
        let per_sec = self.calls_per_sec();
        let (before, after) = match self.load {
            Some((a, b)) => (format!("{a:.2}"), format!("{b:.2}")),
            None => ("null".into(), "null".into()),
        };
        let other = self
            .other_cores
            .map_or_else(|| "null".into(), |cores| format!("{cores:.3}"));
        let quiet = self
            .quiet()
            .map_or("null", |q| if q { "true" } else { "false" });
        format!(
            r#"{{"calls":{calls},"ok":{ok},"over_limit":{over_limit},"errors":{errors},"calls_per_sec":{per_sec:.1},"latency_us":{{"p50":{p50:.1},"p90":{p90:.1},"p99":{p99:.1},"p999":{p999:.1},"max":{max:.1}}},"load_before":{before},"load_after":{after},"other_cores":{other},"quiet":{quiet}}}"#
        )
    }

    /// What the machine did meanwhile: load averages, other work, and whether it was quiet
    /// (empty where nothing could be read).
    fn machine_line(&self) -> String {
        use std::fmt::Write;
        let mut parts = Vec::new();
        if let Some((a, b)) = self.load {
            parts.push(format!("load average {a:.2} before, {b:.2} after"));
        }
        if let Some(cores) = self.other_cores {
            parts.push(format!(
                "other work {cores:.2} cores (the machine's CPU less this load generator's and \
                 --server-pid's)"
            ));
        }
        let mut line = parts.join("; ");
        match (self.quiet(), self.other_cores) {
            (Some(false), Some(_)) => write!(
                line,
                ": the machine was NOT quiet (>= {QUIET_OTHER_CORES} core of other work); timing \
                 figures include other work"
            ),
            (Some(false), None) => write!(
                line,
                ": the machine was NOT quiet (load average >= {QUIET_LOAD}); timing figures \
                 include other work"
            ),
            (Some(true), Some(_)) => write!(line, ": quiet"),
            _ => Ok(()),
        }
        .expect("writing to a String cannot fail");
        if !line.is_empty() {
            line.push('\n');
        }
        line
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
        let load = self.machine_line();
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
            other_cores: None,
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
        assert!(
            text.ends_with(
                r#""load_before":0.50,"load_after":1.50,"other_cores":null,"quiet":false}"#
            ),
            "{text}"
        );
        assert!(report.text().contains("NOT quiet (load average"));
    }

    /// Measured other work decides, whatever the load average says (it counts the load
    /// generator and a local server too).
    #[test]
    fn other_work_decides_quiet() {
        let report = |other_cores| Report {
            calls: 1,
            ok: 1,
            over_limit: 0,
            errors: 0,
            elapsed: Duration::from_secs(1),
            latency: Histogram::new(3).unwrap(),
            first_error: None,
            load: Some((1.9, 2.1)),
            other_cores,
        };
        let busy_but_ours = report(Some(0.04));
        assert_eq!(busy_but_ours.quiet(), Some(true));
        assert!(
            busy_but_ours
                .json()
                .ends_with(r#""other_cores":0.040,"quiet":true}"#)
        );
        assert!(busy_but_ours.text().contains("other work 0.04 cores"));
        assert!(busy_but_ours.text().trim_end().ends_with(": quiet"));
        let shared = report(Some(0.6));
        assert_eq!(shared.quiet(), Some(false));
        assert!(
            shared
                .text()
                .contains("NOT quiet (>= 0.1 core of other work)")
        );
        let unknown = Report {
            load: None,
            ..report(None)
        };
        assert_eq!(unknown.quiet(), None);
        assert!(
            unknown
                .json()
                .ends_with(r#""other_cores":null,"quiet":null}"#)
        );
        assert!(!unknown.text().contains("quiet"));
    }
}
