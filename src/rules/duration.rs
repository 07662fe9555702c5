//! `window:` durations (`500ms`, `10s`, `1h30m`, `2d`) to and from nanoseconds.

use crate::clock::{MILLI, Nanos, SECOND};

/// The units a window may be written in, longest first (the order they must appear in).
const UNITS: [(&str, Nanos); 5] = [
    ("d", 86_400 * SECOND),
    ("h", 3_600 * SECOND),
    ("m", 60 * SECOND),
    ("s", SECOND),
    ("ms", MILLI),
];

/// The longest window: a year, the longest upstream unit.
pub(super) const MAX_WINDOW: Nanos = 365 * 86_400 * SECOND;

/// Parses a window such as `1m30s`: integer amounts, each followed by a unit (`ms`, `s`, `m`,
/// `h`, `d`), units in decreasing order and each at most once; 1 ms ..= 365 d.
///
/// The error is the whole message, e.g. `invalid window '10x': unknown unit 'x' (use ms, s, m, h, d)`.
pub fn parse(text: &str) -> Result<Nanos, String> {
    let invalid = |why: &str| format!("invalid window '{text}': {why}");
    if text.is_empty() {
        return Err(invalid("empty"));
    }
    let bytes = text.as_bytes();
    let mut total: Nanos = 0;
    // Index into UNITS of the last unit seen: the next one must come strictly after it.
    let mut last_unit: Option<usize> = None;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(invalid("expected a number"));
        }
        let digits = &text[start..i];
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &text[unit_start..i];
        if unit.is_empty() {
            return Err(invalid(if i == bytes.len() {
                "missing unit (use ms, s, m, h, d)"
            } else {
                "expected a unit (use ms, s, m, h, d)"
            }));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(invalid(&format!(
                "unknown unit '{unit}' (use ms, s, m, h, d)"
            )));
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(invalid(
                "units must appear once each, longest first (e.g. 1h30m)",
            ));
        }
        last_unit = Some(index);
        // Saturate rather than fail on overflow: anything that large is over the maximum anyway.
        let amount: Nanos = digits.parse().unwrap_or(Nanos::MAX);
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

/// Formats a window the way [`parse`] reads it, e.g. `90 s` as `1m30s` (`0s` for zero).
/// Anything below a millisecond, which `parse` never yields, is written as `ns`.
pub(super) fn format(window: Nanos) -> String {
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
