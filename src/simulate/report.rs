//! The text table and the JSON document of a simulation.

use std::fmt::Write as _;

use super::runner::AlgorithmRun;
use sluice::clock::{MILLI, Nanos};

/// What was simulated, for headings.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The pattern's name (`edge-burst`, ...) or `times` for a times file.
    pub pattern: String,
    /// Calls allowed per window.
    pub limit: u64,
    /// The window in nanoseconds.
    pub window: Nanos,
    /// The token bucket's capacity.
    pub burst: u64,
}

/// A duration in seconds for people: `10s`, `0.5s`, `1.25s`.
pub fn seconds(nanos: i128) -> String {
    let s = format!("{:.3}", nanos as f64 / 1e9);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}s")
}

/// The table: one row per algorithm with admitted, denied and the most admitted in any window.
pub fn table(scenario: &Scenario, outcomes: &[AlgorithmRun]) -> String {
    let w = seconds(i128::from(scenario.window));
    let calls = outcomes.first().map_or(0, |o| o.decisions.len());
    let mut out = format!(
        "pattern {}: limit {} per {w}, {calls} calls (token bucket: burst {}, refill {} per {w})\n\n",
        scenario.pattern, scenario.limit, scenario.burst, scenario.limit
    );
    let last = format!("max in any {w}");
    let _ = writeln!(
        out,
        "{:<16} {:>9} {:>9} {:>w2$}",
        "algorithm",
        "admitted",
        "denied",
        last,
        w2 = last.len().max(8)
    );
    for o in outcomes {
        let _ = writeln!(
            out,
            "{:<16} {:>9} {:>9} {:>w2$}",
            o.algorithm.name(),
            o.admitted,
            o.denied,
            o.max_in_any_window,
            w2 = last.len().max(8)
        );
    }
    out
}

/// Milliseconds as a JSON number: an integer when exact, else a fraction.
fn millis(nanos: i64) -> String {
    let per = MILLI as i64;
    if nanos % per == 0 {
        (nanos / per).to_string()
    } else {
        // Nanosecond precision, trailing zeros dropped: 1.5, 663.333333.
        let s = format!("{:.6}", nanos as f64 / per as f64);
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The JSON document, keys in the documented order: `{"pattern", "limit", "window_ms",
/// "results": [{"algorithm", "admitted", "denied", "max_in_any_window", "decisions":
/// [{"t_ms", "admitted"}]}]}`. Written by hand because every string in it is one of ours
/// (pattern and algorithm names), so nothing needs escaping, and the key order is kept.
pub fn json(scenario: &Scenario, outcomes: &[AlgorithmRun]) -> String {
    let mut out = format!(
        r#"{{"pattern":"{}","limit":{},"window_ms":{},"results":["#,
        scenario.pattern,
        scenario.limit,
        millis(i64::try_from(scenario.window).unwrap_or(i64::MAX))
    );
    for (i, o) in outcomes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            r#"{{"algorithm":"{}","admitted":{},"denied":{},"max_in_any_window":{},"decisions":["#,
            o.algorithm.name(),
            o.admitted,
            o.denied,
            o.max_in_any_window
        );
        for (j, &(t, admitted)) in o.decisions.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            let _ = write!(out, r#"{{"t_ms":{},"admitted":{admitted}}}"#, millis(t));
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds print without trailing zeros.
    #[test]
    fn seconds_are_short() {
        assert_eq!(seconds(10_000_000_000), "10s");
        assert_eq!(seconds(500_000_000), "0.5s");
        assert_eq!(seconds(-1_250_000_000), "-1.25s");
    }

    /// Whole milliseconds are JSON integers, fractions are JSON fractions.
    #[test]
    fn millis_are_integers_when_exact() {
        assert_eq!(millis(398_000_000), "398");
        assert_eq!(millis(1_500_000), "1.5");
        assert_eq!(millis(-2_000_000), "-2");
        assert_eq!(millis(663_333_333), "663.333333");
    }

    /// The JSON parses, with the documented keys in the documented order.
    #[test]
    fn json_has_the_documented_shape() {
        use crate::simulate::{TrafficPattern, runner};
        use sluice::clock::SECOND;
        let arrivals = TrafficPattern::EdgeBurst.arrivals(3, 10 * SECOND).unwrap();
        let outcomes = runner::run(&arrivals, 3, 10 * SECOND, 3);
        let scenario = Scenario {
            pattern: "edge-burst".into(),
            limit: 3,
            window: 10 * SECOND,
            burst: 3,
        };
        let text = json(&scenario, &outcomes);
        assert!(text.starts_with(r#"{"pattern":"edge-burst","limit":3,"window_ms":10000,"results":[{"algorithm":"fixed_window","admitted":6,"denied":0,"max_in_any_window":6,"decisions":[{"t_ms":8000,"admitted":true},{"t_ms":8663.333333,"admitted":true}"#), "{text}");
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let results = doc["results"].as_array().unwrap();
        let names: Vec<&str> = results
            .iter()
            .map(|r| r["algorithm"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "fixed_window",
                "sliding_window",
                "sliding_log",
                "token_bucket"
            ]
        );
        for r in results {
            let decisions = r["decisions"].as_array().unwrap();
            assert_eq!(decisions.len(), 6);
            let admitted = decisions.iter().filter(|d| d["admitted"] == true).count();
            assert_eq!(r["admitted"].as_u64(), Some(admitted as u64));
            assert_eq!(r["denied"].as_u64(), Some(6 - admitted as u64));
        }
    }
}
