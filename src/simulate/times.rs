//! Reading `--times FILE`: one arrival time in seconds per line (fractional allowed).

use super::pattern::MAX_CALLS;
use sluice::clock::SECOND;

/// The latest arrival time accepted, in seconds (about 31 years: far beyond any sensible run,
/// and small enough that nanosecond arithmetic never overflows).
const MAX_SECONDS: f64 = 1e9;

/// Parses the text of a times file into arrival times in nanoseconds, sorted. Blank lines and
/// lines starting with `#` are skipped. The error names the line: `line 3: 'abc' is not ...`.
pub fn parse(text: &str) -> Result<Vec<i64>, String> {
    let mut times = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |why: &str| format!("line {}: '{line}' {why}", index + 1);
        let seconds: f64 = line
            .parse()
            .map_err(|_| at("is not a time in seconds (e.g. 1.25)"))?;
        if !seconds.is_finite() || !(0.0..=MAX_SECONDS).contains(&seconds) {
            return Err(at(&format!(
                "is out of range (0 to {MAX_SECONDS:e} seconds)"
            )));
        }
        if times.len() == MAX_CALLS {
            return Err(format!("more than {MAX_CALLS} arrival times"));
        }
        // In range, so the product fits an i64; rounding makes 0.1 exactly 100 ms.
        times.push((seconds * SECOND as f64).round() as i64);
    }
    if times.is_empty() {
        return Err("no arrival times (one time in seconds per line)".into());
    }
    // Calls are replayed in time order, as a clock would see them.
    times.sort_unstable();
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole and fractional seconds parse exactly; blanks and comments are skipped; order is sorted.
    #[test]
    fn parses_sorted_times() {
        let times = parse("# arrivals\n1.5\n\n0.1\n  2 \n0\n").unwrap();
        let ms = sluice::clock::MILLI as i64;
        assert_eq!(times, [0, 100 * ms, 1_500 * ms, 2_000 * ms]);
    }

    /// Bad input is an error naming the line, never a panic.
    #[test]
    fn rejects_bad_input_with_line_numbers() {
        assert_eq!(
            parse("1\nabc\n").unwrap_err(),
            "line 2: 'abc' is not a time in seconds (e.g. 1.25)"
        );
        assert!(
            parse("-1")
                .unwrap_err()
                .starts_with("line 1: '-1' is out of range")
        );
        assert!(parse("NaN").unwrap_err().contains("out of range"));
        assert!(parse("inf").unwrap_err().contains("out of range"));
        assert!(parse("1e300").unwrap_err().contains("out of range"));
        assert!(parse("1,5").unwrap_err().contains("not a time"));
        assert!(
            parse("\n# only a comment\n")
                .unwrap_err()
                .starts_with("no arrival times")
        );
    }
}
