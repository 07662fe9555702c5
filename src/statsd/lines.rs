//! The lines of one flush: each counter's increase since the last flush (`name:5|c`; a counter
//! that did not change is not sent, as gostats does), and the timer's new samples.
//!
//! The timer is kept as a histogram, not as samples, so each flush sends one `|ms` line per
//! bucket that gained samples, at the bucket's midpoint and with a sample rate of `1/n` (the
//! receiver counts `n` samples). When every new sample fell in one bucket the line holds their
//! exact mean instead. Counts and sums are exact; percentiles are as fine as the buckets.

use std::collections::HashMap;
use std::fmt::Write;

use super::{Mogrifier, StatsdFormat, StatsdSettings};
use crate::metrics::{CompatStat, CompatStatValue, TimerTotals};

/// The lines of successive flushes: what each stat held at the last one, and its name and
/// tags as written (mogrified once, not per flush).
pub(super) struct Lines {
    format: StatsdFormat,
    /// EXTRA_TAGS, cleaned and in key order.
    tags: Vec<(String, String)>,
    mogrifiers: Vec<Mogrifier>,
    seen: HashMap<String, Seen>,
}

/// One stat as last flushed.
struct Seen {
    /// What goes before `:value`.
    name: String,
    /// What goes after the type (`|#k:v` in DogStatsD; empty in plain statsd).
    tags: String,
    /// The counter's total, or the timer's cumulative bucket counts and sum.
    last: Last,
}

enum Last {
    Counter(u64),
    Timer(TimerTotals),
}

impl Lines {
    pub(super) fn new(settings: &StatsdSettings) -> Self {
        let mut tags: Vec<(String, String)> = (settings.tags.iter())
            .filter(|(k, v)| !k.is_empty() && !v.is_empty())
            .map(|(k, v)| (k.clone(), clean(v)))
            .collect();
        tags.sort();
        Self {
            format: settings.format,
            tags,
            mogrifiers: settings.mogrifiers.clone(),
            seen: HashMap::new(),
        }
    }

    /// The lines, each ending in `\n`, for what changed since the last call.
    pub(super) fn changed(&mut self, stats: &[CompatStat]) -> Vec<String> {
        let mut out = Vec::new();
        for stat in stats {
            if !self.seen.contains_key(&stat.name) {
                let seen = self.first_seen(&stat.name, &stat.value);
                self.seen.insert(stat.name.clone(), seen);
            }
            let Some(seen) = self.seen.get_mut(&stat.name) else {
                continue;
            };
            match (&stat.value, &mut seen.last) {
                (CompatStatValue::Counter(now), Last::Counter(last)) => {
                    let delta = now.saturating_sub(*last);
                    *last = *now;
                    if delta > 0 {
                        out.push(format!("{}:{delta}|c{}\n", seen.name, seen.tags));
                    }
                }
                (CompatStatValue::Timer(now), Last::Timer(last)) => {
                    timer_lines(&seen.name, &seen.tags, last, now, &mut out);
                    *last = now.clone();
                }
                // A name never changes kind.
                _ => {}
            }
        }
        out
    }

    /// A stat's name and tags as written, and a zero to count from.
    fn first_seen(&self, name: &str, value: &CompatStatValue) -> Seen {
        let last = match value {
            CompatStatValue::Counter(_) => Last::Counter(0),
            CompatStatValue::Timer(now) => Last::Timer(TimerTotals {
                buckets: now.buckets.iter().map(|&(bound, _)| (bound, 0)).collect(),
                ..TimerTotals::default()
            }),
        };
        match self.format {
            StatsdFormat::Statsd => {
                let mut written = name.to_owned();
                for (key, value) in &self.tags {
                    let _ = write!(written, ".__{key}={value}");
                }
                Seen {
                    name: written,
                    tags: String::new(),
                    last,
                }
            }
            StatsdFormat::DogStatsd => {
                let mut tags: Vec<String> = (self.tags.iter())
                    .map(|(key, value)| format!("{key}:{value}"))
                    .collect();
                let name = match self.mogrifiers.iter().find_map(|m| m.apply(name)) {
                    Some((renamed, more)) => {
                        tags.extend(more);
                        renamed
                    }
                    None => name.to_owned(),
                };
                let tags = if tags.is_empty() {
                    String::new()
                } else {
                    format!("|#{}", tags.join(","))
                };
                Seen { name, tags, last }
            }
        }
    }
}

/// gostats' tag value cleaning: `.`, `:` and `|` would break the line, so they become `_`.
fn clean(value: &str) -> String {
    value.replace(['.', ':', '|'], "_")
}

/// The timer's new samples since `last`: one line per bucket that gained samples.
fn timer_lines(
    name: &str,
    tags: &str,
    last: &TimerTotals,
    now: &TimerTotals,
    out: &mut Vec<String>,
) {
    let count = now.count.saturating_sub(last.count);
    if count == 0 {
        return;
    }
    let mut gained = Vec::new();
    let (mut lower, mut before_now, mut before_last) = (0.0, 0, 0);
    for (i, &(upper, cumulative)) in now.buckets.iter().enumerate() {
        let was = last.buckets.get(i).map_or(0, |&(_, c)| c);
        let new =
            (cumulative.saturating_sub(before_now)).saturating_sub(was.saturating_sub(before_last));
        if new > 0 {
            let value = if upper.is_finite() {
                (lower + upper) / 2.0
            } else {
                lower
            };
            gained.push((value, new));
        }
        (lower, before_now, before_last) = (upper, cumulative, was);
    }
    if let [(_, n)] = gained.as_slice() {
        let mean = (now.sum_ms - last.sum_ms) / count as f64;
        gained = vec![(mean.max(0.0), *n)];
    }
    for (value, n) in gained {
        let rate = if n > 1 {
            format!("|@{}", 1.0 / n as f64)
        } else {
            String::new()
        };
        out.push(format!("{name}:{}|ms{rate}{tags}\n", round(value)));
    }
}

/// Milliseconds to microsecond precision, written without a trailing `.0` for whole values.
fn round(ms: f64) -> f64 {
    (ms * 1_000.0).round() / 1_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(name: &str, n: u64) -> CompatStat {
        CompatStat {
            name: name.into(),
            value: CompatStatValue::Counter(n),
        }
    }

    fn settings(format: StatsdFormat) -> StatsdSettings {
        StatsdSettings {
            format,
            tags: vec![
                ("zone".into(), "eu.west".into()),
                ("app".into(), "rl".into()),
            ],
            ..StatsdSettings::new("localhost:8125")
        }
    }

    /// Deltas only, unchanged counters left out; plain statsd writes the tags into the name in
    /// key order, cleaned.
    #[test]
    fn counters_send_their_increase() {
        let mut lines = Lines::new(&settings(StatsdFormat::Statsd));
        assert_eq!(
            lines.changed(&[counter("a.b", 3), counter("a.c", 0)]),
            ["a.b.__app=rl.__zone=eu_west:3|c\n"]
        );
        assert!(lines.changed(&[counter("a.b", 3)]).is_empty());
        assert_eq!(
            lines.changed(&[counter("a.b", 5)]),
            ["a.b.__app=rl.__zone=eu_west:2|c\n"]
        );
    }

    /// DogStatsD writes `|#` tags: EXTRA_TAGS first, then the mogrifier's.
    #[test]
    fn dogstatsd_tags_and_mogrifiers() {
        let mut settings = settings(StatsdFormat::DogStatsd);
        settings.mogrifiers =
            vec![Mogrifier::new(r"^a\.(\w+)$", "a", vec![("what".into(), "$1".into())]).unwrap()];
        let mut lines = Lines::new(&settings);
        assert_eq!(
            lines.changed(&[counter("a.b", 1), counter("c.d", 2)]),
            [
                "a:1|c|#app:rl,zone:eu_west,what:b\n",
                "c.d:2|c|#app:rl,zone:eu_west\n"
            ]
        );
    }

    /// A timer sends each bucket that gained samples, with `@1/n`; samples in one bucket send
    /// their exact mean.
    #[test]
    fn timers_send_bucket_samples() {
        let timer = |count, sum_ms, buckets: &[(f64, u64)]| CompatStat {
            name: "t".into(),
            value: CompatStatValue::Timer(TimerTotals {
                count,
                sum_ms,
                buckets: buckets.to_vec(),
            }),
        };
        let mut lines = Lines::new(&StatsdSettings::new("x:1"));
        let inf = f64::INFINITY;
        assert_eq!(
            lines.changed(&[timer(2, 3.0, &[(1.0, 0), (2.0, 2), (inf, 2)])]),
            ["t:1.5|ms|@0.5\n"]
        );
        assert_eq!(
            lines.changed(&[timer(5, 10.0, &[(1.0, 1), (2.0, 3), (inf, 5)])]),
            ["t:0.5|ms\n", "t:2|ms|@0.5\n"]
        );
        assert!(
            lines
                .changed(&[timer(5, 10.0, &[(1.0, 1), (2.0, 3), (inf, 5)])])
                .is_empty()
        );
    }
}
