//! `sluice simulate --rlqs`'s figures as a table (the run itself is the library's
//! `rlqs::simulate`: the real book sharing one limit among many modelled Envoys).

use std::fmt::Write as _;

use sluice::rlqs::{Scenario, SimulationOutcome};

/// The figures as a short table.
pub fn table(s: &Scenario, o: &SimulationOutcome) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rlqs: {} streams, {} s, limit {}/s burst {}, demand {}x the limit (zipf {}), churn {}/min",
        s.streams, s.seconds, s.rate, s.burst, s.load, s.skew, s.churn
    );
    let rows = [
        (
            "worst 10 s window / (B + R*T)",
            format!("{:.3}", o.worst_plain),
        ),
        (
            "worst 10 s window / bound (with slack)",
            format!("{:.3}", o.worst_bound),
        ),
        (
            "admitted / limit after warm-up",
            format!("{:.3}", o.utilisation),
        ),
        (
            "Jain's index (constrained streams)",
            format!("{:.3} over {}", o.jain, o.constrained),
        ),
        ("invariant breaches", o.breaches.to_string()),
        ("reports answered", o.reports.to_string()),
        (
            "reports/s (wall clock, in the book)",
            format!("{:.0}", o.reports_per_second),
        ),
    ];
    for (name, value) in rows {
        let _ = writeln!(out, "{name:<40} {value}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run's figures print as a table.
    #[test]
    fn a_small_run_prints_its_figures() {
        let s = Scenario {
            streams: 5,
            seconds: 10,
            rate: 100,
            burst: 100,
            load: 2.0,
            skew: 0.0,
            churn: 0.0,
        };
        let o = sluice::rlqs::simulate(&s);
        assert!(table(&s, &o).contains("invariant breaches"));
    }
}
