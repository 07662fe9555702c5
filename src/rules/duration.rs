//! `window:` durations (`500ms`, `10s`, `1h30m`, `2d`) to and from nanoseconds.

use crate::clock::duration::{Term, terms};
use crate::clock::{MILLI, Nanos, SECOND};

/// The units a window may be written in, longest first (the order they must appear in).
const UNITS: [(&str, Nanos); 5] = [
    ("d", 86_400 * SECOND),
    ("h", 3_600 * SECOND),
    ("m", 60 * SECOND),
    ("s", SECOND),
    ("ms", MILLI),
];

/// The longest window: a year, the longest envoyproxy/ratelimit unit.
pub(super) const MAX_WINDOW: Nanos = 365 * 86_400 * SECOND;

/// Parses a window such as `1m30s`: integer amounts, each followed by a unit (`ms`, `s`, `m`,
/// `h`, `d`), units in decreasing order and each at most once; 1 ms ..= 365 d.
///
/// The terms are read by `clock::duration::terms`, the tokenizer of every duration in sluice; this grammar only
/// narrows it (whole numbers, its own units and order), so `window:` and the duration flags
/// never disagree about where a number ends and a unit begins.
///
/// The error is the whole message, e.g. `invalid window '10x': unknown unit 'x' (use ms, s, m, h,
/// d)`.
pub fn parse(text: &str) -> Result<Nanos, String> {
    let invalid = |why: &str| format!("invalid window '{text}': {why}");
    if text.is_empty() {
        return Err(invalid("empty"));
    }
    let mut total: Nanos = 0;
    // Index into UNITS of the last unit seen: the next one must come strictly after it.
    let mut last_unit: Option<usize> = None;
    for term in terms(text) {
        let term = term.map_err(|problem| invalid(&problem.to_string()))?;
        let (index, trailing) = window_unit(term).map_err(|why| invalid(&why))?;
        if last_unit.is_some_and(|last| index <= last) {
            return Err(invalid(
                "units must appear once each, longest first (e.g. 1h30m)",
            ));
        }
        last_unit = Some(index);
        if trailing {
            // What follows the unit is not a digit, so no further term can start there.
            return Err(invalid("expected a number"));
        }
        // Saturate rather than fail on overflow: anything that large is over the maximum anyway.
        let amount: Nanos = term.whole.parse().unwrap_or(Nanos::MAX);
        total = total.saturating_add(amount.saturating_mul(UNITS[index].1));
    }
    if total == 0 {
        return Err("window must be at least 1ms".to_string());
    }
    if total > MAX_WINDOW {
        return Err(format!(
            "window '{text}' is longer than the maximum of 365d"
        ));
    }
    Ok(total)
}

/// The index into [`UNITS`] of a term's unit, and whether anything follows the unit. The
/// shared reader takes every character up to the next digit as the unit; a window's unit is
/// only the ASCII letters at its start, and no term may have a fraction.
fn window_unit(term: Term<'_>) -> Result<(usize, bool), String> {
    if term.whole.is_empty() {
        return Err("expected a number".to_string());
    }
    let letters = term
        .unit
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(term.unit.len());
    let (unit, trailing) = term.unit.split_at(letters);
    if unit.is_empty() {
        // Without a fraction or other trailing text, the number ended the window.
        return Err(if term.fraction.is_none() && trailing.is_empty() {
            "missing unit (use ms, s, m, h, d)".to_string()
        } else {
            "expected a unit (use ms, s, m, h, d)".to_string()
        });
    }
    if term.fraction.is_some() {
        return Err("expected a unit (use ms, s, m, h, d)".to_string());
    }
    match UNITS.iter().position(|(name, _)| *name == unit) {
        Some(index) => Ok((index, !trailing.is_empty())),
        None => Err(format!("unknown unit '{unit}' (use ms, s, m, h, d)")),
    }
}

/// Formats a window the way [`parse`] reads it, e.g. `90 s` as `1m30s` (`0s` for zero).
/// Anything below a millisecond, which `parse` never yields, is written as `ns`.
pub fn format(window: Nanos) -> String {
    if window == 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = window;
    for (name, len) in UNITS {
        if rest >= len {
            out.push_str(&format!("{}{name}", rest / len));
            rest %= len;
        }
    }
    if rest > 0 {
        out.push_str(&format!("{rest}ns"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Single units and decreasing combinations parse to the right number of nanoseconds.
    #[test]
    fn parses_units_and_combinations() {
        assert_eq!(parse("500ms"), Ok(500 * MILLI));
        assert_eq!(parse("10s"), Ok(10 * SECOND));
        assert_eq!(parse("1m"), Ok(60 * SECOND));
        assert_eq!(parse("1h30m"), Ok(5_400 * SECOND));
        assert_eq!(parse("2d"), Ok(172_800 * SECOND));
        assert_eq!(parse("1m30s"), Ok(90 * SECOND));
        assert_eq!(parse("1s500ms"), Ok(1_500 * MILLI));
        assert_eq!(parse("1ms"), Ok(MILLI));
        assert_eq!(parse("365d"), Ok(MAX_WINDOW));
    }

    /// Malformed windows are rejected with a message naming the problem.
    #[test]
    fn rejects_malformed_windows() {
        let err = |s: &str| parse(s).unwrap_err();
        assert_eq!(
            err("10x"),
            "invalid window '10x': unknown unit 'x' (use ms, s, m, h, d)"
        );
        assert!(err("10").contains("missing unit"), "{}", err("10"));
        assert!(err("").contains("empty"));
        assert!(err("s").contains("expected a number"));
        assert!(err("30s1m").contains("longest first"));
        assert!(err("1m1m").contains("longest first"));
        assert!(err("1.5s").contains("expected a unit"));
        assert!(err("-1s").contains("expected a number"));
        assert!(err("1 s").contains("expected a unit"));
        assert!(err("10S").contains("unknown unit 'S'"));
    }

    /// The shared term reader reads more than a window allows (fractions, any text as a unit);
    /// each such case keeps the message this grammar gave before it used the shared reader.
    #[test]
    fn narrows_the_shared_term_reader() {
        let err = |s: &str| parse(s).unwrap_err();
        assert_eq!(
            err("1.5s"),
            "invalid window '1.5s': expected a unit (use ms, s, m, h, d)"
        );
        assert!(err("5.s").contains("expected a unit"));
        assert!(err("1.").contains("expected a unit"));
        assert!(err("1µs").contains("expected a unit"));
        assert!(err(".5s").contains("expected a number"));
        assert!(err("1h.5m").contains("expected a number"));
        assert!(err("1h 30m").contains("expected a number"));
        assert!(err("1s-").contains("expected a number"));
        assert!(err("1s5").contains("missing unit"));
        assert!(err("1sx").contains("unknown unit 'sx'"));
        assert!(err("1us").contains("unknown unit 'us'"));
        assert!(err("0").contains("missing unit"));
    }

    /// Zero and out-of-range windows are rejected; huge numbers do not overflow.
    #[test]
    fn rejects_out_of_range() {
        assert_eq!(parse("0s").unwrap_err(), "window must be at least 1ms");
        assert_eq!(parse("0ms").unwrap_err(), "window must be at least 1ms");
        assert!(parse("366d").unwrap_err().contains("maximum of 365d"));
        assert!(parse("365d1ms").unwrap_err().contains("maximum"));
        assert!(
            parse("99999999999999999999999999d")
                .unwrap_err()
                .contains("maximum")
        );
        assert!(
            parse("18446744073709551615h")
                .unwrap_err()
                .contains("maximum")
        );
    }

    /// Formatting is the inverse of parsing.
    #[test]
    fn formats_back() {
        for s in [
            "500ms", "10s", "1m", "1h30m", "2d", "1m30s", "1s500ms", "365d",
        ] {
            assert_eq!(format(parse(s).unwrap()), s);
        }
        assert_eq!(format(0), "0s");
        assert_eq!(format(1_500), "1500ns");
    }
}
