//! Durations as text in Go's grammar (`150us`, `10ms`, `1.5s`, `1m30s`, `24h`): the one grammar of
//! every duration flag and environment variable, as envoyproxy/ratelimit's settings write them.
//!
//! A duration is one or more terms `<number><unit>` (`1h30m`, `1.5s`); the number may have a
//! fraction, the units are `ns`, `us` (or `µs`), `ms`, `s`, `m` and `h`, in any order. `0` needs
//! no unit. Negative durations and durations past Go's range (2^63 − 1 ns, about 292 years) are
//! errors, never a panic or a silent clamp. Rule files' `window:` shares the term reader
//! (`terms`) and adds its own rules (whole numbers, days, longest unit first).

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;
use std::time::Duration;

/// The longest duration (Go's `time.Duration` range: 2^63 − 1 nanoseconds).
pub const MAX: Duration = Duration::from_nanos(i64::MAX as u64);

/// The units of the grammar and their length in nanoseconds.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000), // U+00B5 MICRO SIGN
    ("μs", 1_000), // U+03BC GREEK SMALL LETTER MU
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Why a text is not a duration (or not one that is allowed where it was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Nothing was written.
    #[error("empty")]
    Empty,
    /// A term does not start with a number.
    #[error("expected a number")]
    ExpectedNumber,
    /// A number has no unit (only `0` may go without one).
    #[error("missing unit (use ns, us, ms, s, m or h, e.g. 10s)")]
    MissingUnit,
    /// A unit the grammar does not know.
    #[error("unknown unit '{0}' (use ns, us, ms, s, m or h)")]
    UnknownUnit(String),
    /// A negative duration.
    #[error("must not be negative")]
    Negative,
    /// Shorter than the least value allowed here.
    #[error("must be at least {}", format(*.0))]
    Below(Duration),
    /// Longer than the most allowed here (or than any duration can be).
    #[error("must be at most {}", format(*.0))]
    Above(Duration),
}

/// A text that is not a duration, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration '{text}': {problem}")]
pub struct DurationError {
    /// The text as written.
    pub text: String,
    /// What is wrong with it.
    pub problem: Problem,
}

/// One `<number><unit>` term as written: `1.5s` is whole `1`, fraction `Some("5")`, unit `s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term<'a> {
    /// The digits before the point (may be empty, as in `.5s`).
    pub whole: &'a str,
    /// The digits after the point, when there is one.
    pub fraction: Option<&'a str>,
    /// The unit: the characters up to the next digit or point (may be empty).
    pub unit: &'a str,
}

/// Reads `text` as a run of terms. A term without any digit is [`Problem::ExpectedNumber`]; the
/// units are not checked here (each grammar has its own).
pub(crate) fn terms(text: &str) -> impl Iterator<Item = Result<Term<'_>, Problem>> + '_ {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let whole_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (whole, after) = rest.split_at(whole_len);
        let (fraction, after) = match after.strip_prefix('.') {
            Some(after) => {
                let len = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                (Some(&after[..len]), &after[len..])
            }
            None => (None, after),
        };
        if whole.is_empty() && fraction.is_none_or(str::is_empty) {
            rest = "";
            return Some(Err(Problem::ExpectedNumber));
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        rest = after;
        Some(Ok(Term {
            whole,
            fraction,
            unit,
        }))
    })
}

/// Parses a duration in Go's grammar (`150us`, `10ms`, `1.5s`, `1m30s`, `24h`, `0`).
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    parse_nanos(text)
        .map(|nanos| Duration::from_nanos(nanos as u64))
        .map_err(|problem| DurationError {
            text: text.to_string(),
            problem,
        })
}

/// Parses a duration and checks that it lies in `range`.
pub fn parse_in(text: &str, range: RangeInclusive<Duration>) -> Result<Duration, DurationError> {
    let value = parse(text)?;
    let problem = if value < *range.start() {
        Problem::Below(*range.start())
    } else if value > *range.end() {
        Problem::Above(*range.end())
    } else {
        return Ok(value);
    };
    Err(DurationError {
        text: text.to_string(),
        problem,
    })
}

/// The grammar proper, in nanoseconds (at most [`MAX`]).
fn parse_nanos(text: &str) -> Result<u128, Problem> {
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if body.is_empty() {
        return Err(Problem::Empty);
    }
    if body == "0" {
        return Ok(0);
    }
    let limit = MAX.as_nanos();
    let mut total: u128 = 0;
    for term in terms(body) {
        total = total.saturating_add(term_nanos(term?)?);
        if total > limit {
            return Err(Problem::Above(MAX));
        }
    }
    if negative && total > 0 {
        return Err(Problem::Negative);
    }
    Ok(total)
}

/// The length of one term, truncated to whole nanoseconds (as Go does); saturates far past
/// [`MAX`] rather than overflowing.
fn term_nanos(term: Term<'_>) -> Result<u128, Problem> {
    if term.unit.is_empty() {
        return Err(Problem::MissingUnit);
    }
    let Some(&(_, unit)) = UNITS.iter().find(|(name, _)| *name == term.unit) else {
        return Err(Problem::UnknownUnit(term.unit.to_string()));
    };
    let whole = digits_value(term.whole).saturating_mul(unit);
    let fraction = term.fraction.map_or(0, |digits| {
        // Digits past the 20th cannot change the result in whole nanoseconds (a unit is at most
        // 3.6e12 ns), and 20 digits times the unit stays far inside u128.
        let digits = &digits[..digits.len().min(20)];
        let scale = 10u128.pow(digits.len() as u32);
        digits_value(digits).saturating_mul(unit) / scale
    });
    Ok(whole.saturating_add(fraction))
}

/// The value of a run of ASCII digits, saturating (anything that large is out of range anyway).
fn digits_value(digits: &str) -> u128 {
    digits.bytes().fold(0u128, |value, digit| {
        value
            .saturating_mul(10)
            .saturating_add(u128::from(digit - b'0'))
    })
}

/// Writes a duration the way [`parse`] reads it, compactly: `1h30m`, `1m30s`, `1s500ms`, `150us`,
/// `0s`.
pub fn format(duration: Duration) -> String {
    let mut out = String::new();
    let mut rest = duration.as_nanos();
    for (name, len) in [
        ("h", 3_600_000_000_000),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
        ("ns", 1),
    ] {
        if rest >= len {
            out.push_str(&(rest / len).to_string());
            out.push_str(name);
            rest %= len;
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// A [`Duration`] read and written in this grammar: the type of duration flags, so that clap
/// both parses them and shows their defaults (`default_value_t = GoDuration(DEFAULT)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct GoDuration(pub Duration);

impl FromStr for GoDuration {
    type Err = DurationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse(text).map(GoDuration)
    }
}

impl fmt::Display for GoDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format(self.0))
    }
}

impl From<GoDuration> for Duration {
    fn from(d: GoDuration) -> Self {
        d.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Every form envoyproxy/ratelimit's settings use parses as Go parses it.
    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("150us"), Ok(Duration::from_micros(150)));
        assert_eq!(parse("150µs"), Ok(Duration::from_micros(150)));
        assert_eq!(parse("150μs"), Ok(Duration::from_micros(150)));
        assert_eq!(parse("10ms"), Ok(ms(10)));
        assert_eq!(parse("1.5s"), Ok(ms(1_500)));
        assert_eq!(parse("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("-0s"), Ok(Duration::ZERO));
        assert_eq!(parse("+5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse(".5s"), Ok(ms(500)));
        assert_eq!(parse("5.s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("30s1m"), Ok(ms(90_000)));
        assert_eq!(parse("1h1h"), Ok(Duration::from_secs(7_200)));
        assert_eq!(
            parse("1.0000000001s"),
            Ok(Duration::from_nanos(1_000_000_000))
        );
        assert_eq!(parse("2562047h47m16.854775807s"), Ok(MAX));
    }

    /// Malformed text names its problem, and the error quotes the text.
    #[test]
    fn rejects_malformed_durations() {
        let problem = |s: &str| parse(s).unwrap_err().problem;
        assert_eq!(problem(""), Problem::Empty);
        assert_eq!(problem("-"), Problem::Empty);
        assert_eq!(problem("10"), Problem::MissingUnit);
        assert_eq!(problem("1s10"), Problem::MissingUnit);
        assert_eq!(problem("s"), Problem::ExpectedNumber);
        assert_eq!(problem("."), Problem::ExpectedNumber);
        assert_eq!(problem("10x"), Problem::UnknownUnit("x".into()));
        assert_eq!(problem("2d"), Problem::UnknownUnit("d".into()));
        assert_eq!(problem("1 s"), Problem::UnknownUnit(" s".into()));
        assert_eq!(problem("-1s"), Problem::Negative);
        assert_eq!(
            parse("10x").unwrap_err().to_string(),
            "invalid duration '10x': unknown unit 'x' (use ns, us, ms, s, m or h)"
        );
    }

    /// Values past Go's range are errors, however many digits they have; nothing panics.
    #[test]
    fn rejects_out_of_range_without_panicking() {
        for text in [
            "2562047h47m16.854775808s",
            "18446744073709551615s",
            "99999999999999999999999999999999999999999h",
            "9223372036854775807ns1ns",
        ] {
            assert_eq!(
                parse(text).unwrap_err().problem,
                Problem::Above(MAX),
                "{text}"
            );
        }
        let long_fraction = format!("1.{}s", "9".repeat(400));
        assert_eq!(
            parse(&long_fraction),
            Ok(Duration::from_nanos(1_999_999_999))
        );
    }

    /// A range check says which bound was crossed.
    #[test]
    fn checks_ranges() {
        let range = ms(1)..=Duration::from_secs(60);
        assert_eq!(parse_in("50ms", range.clone()), Ok(ms(50)));
        assert_eq!(
            parse_in("0s", range.clone()).unwrap_err().to_string(),
            "invalid duration '0s': must be at least 1ms"
        );
        assert_eq!(
            parse_in("61s", range).unwrap_err().to_string(),
            "invalid duration '61s': must be at most 1m"
        );
    }

    /// Formatting is compact and parses back to the same value.
    #[test]
    fn formats_back() {
        for (value, text) in [
            (Duration::ZERO, "0s"),
            (ms(50), "50ms"),
            (ms(1_500), "1s500ms"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(86_400), "24h"),
            (Duration::from_micros(150), "150us"),
            (MAX, "2562047h47m16s854ms775us807ns"),
        ] {
            assert_eq!(format(value), text);
            assert_eq!(parse(text), Ok(value));
            assert_eq!(GoDuration(value).to_string(), text);
            assert_eq!(text.parse::<GoDuration>(), Ok(GoDuration(value)));
        }
    }

    /// The term reader splits numbers, fractions and units without judging the units.
    #[test]
    fn reads_terms() {
        let read: Vec<_> = terms("1h2.5xs.").collect();
        assert_eq!(
            read,
            [
                Ok(Term {
                    whole: "1",
                    fraction: None,
                    unit: "h"
                }),
                Ok(Term {
                    whole: "2",
                    fraction: Some("5"),
                    unit: "xs"
                }),
                Err(Problem::ExpectedNumber),
            ]
        );
    }
}
