//! envoyproxy/ratelimit's environment grammar (envconfig's): the process environment as read once,
//! and Go's parsers for booleans, integers (base 0), floats, durations and `k:v` maps.
//!
//! A variable that is absent takes its default; one that is set is parsed as written, so an empty
//! boolean, number or duration is an error, as envoyproxy/ratelimit (which panics) says.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice::clock::duration;

/// A variable whose value is not what its type allows: the start-up error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {problem}")]
pub struct EnvError {
    /// The variable.
    pub name: String,
    /// Its value as set.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

/// The environment variables of the process, read once (tests build their own).
#[derive(Debug, Clone, Default)]
pub struct Env {
    vars: BTreeMap<String, String>,
}

impl Env {
    /// The process environment (variables whose name or value is not UTF-8 are left out: no
    /// envoyproxy/ratelimit name is one).
    pub fn from_process() -> Self {
        Self::from_pairs(std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }))
    }

    /// An environment of these `(name, value)` pairs.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// The value of `name` if set (empty included).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars.get(name).map(String::as_str)
    }

    /// Whether `name` is set.
    pub fn is_set(&self, name: &str) -> bool {
        self.vars.contains_key(name)
    }

    /// The names of every variable set, in order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.vars.keys().map(String::as_str)
    }

    /// `name` as a string, or `default` when absent.
    pub fn string<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.get(name).unwrap_or(default)
    }

    /// `name` as a Go boolean, or `default` when absent.
    pub fn bool(&self, name: &str, default: bool) -> Result<bool, EnvError> {
        self.parsed(name, go_bool).map(|v| v.unwrap_or(default))
    }

    /// `name` as a Go integer (base 0), or `default` when absent.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, EnvError> {
        self.parsed(name, go_int).map(|v| v.unwrap_or(default))
    }

    /// `name` as a Go duration, or `default` when absent.
    pub fn duration(&self, name: &str, default: Duration) -> Result<Duration, EnvError> {
        self.parsed(name, |text| {
            duration::parse(text).map_err(|e| e.problem.to_string())
        })
        .map(|v| v.unwrap_or(default))
    }

    /// `name` as a float, or `default` when absent.
    pub fn float(&self, name: &str, default: f64) -> Result<f64, EnvError> {
        self.parsed(name, go_float).map(|v| v.unwrap_or(default))
    }

    /// `name` parsed by `parse` when set; the error names the variable and its value.
    pub fn parsed<T>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, EnvError> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        parse(value).map(Some).map_err(|problem| EnvError {
            name: name.to_string(),
            value: value.to_string(),
            problem,
        })
    }

    /// An error about the value of `name` (which is set).
    pub fn error(&self, name: &str, problem: impl Into<String>) -> EnvError {
        self.error_in(name, self.get(name).unwrap_or_default(), problem)
    }

    /// An error about `value`, the value `name` stands for: as set, or its default when unset
    /// (which the message then says).
    pub fn error_in(&self, name: &str, value: &str, problem: impl Into<String>) -> EnvError {
        let mut problem = problem.into();
        if !self.is_set(name) {
            problem.push_str(" (the default: the variable is not set)");
        }
        EnvError {
            name: name.to_string(),
            value: value.to_string(),
            problem,
        }
    }
}

/// Go's `strconv.ParseBool`.
pub fn go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err("not a boolean (use true or false)".into()),
    }
}

/// Go's `strconv.ParseInt(text, 0, 64)`: an optional sign, then `0x`, `0o`, `0b` or a leading
/// `0` (octal) for the base, `_` between digits.
pub fn go_int(text: &str) -> Result<i64, String> {
    let syntax = || {
        format!(
            "not an integer{}",
            if text.is_empty() { " (empty)" } else { "" }
        )
    };
    let (negative, body) = match text.as_bytes().first() {
        Some(b'+') => (false, &text[1..]),
        Some(b'-') => (true, &text[1..]),
        _ => (false, text),
    };
    if body.is_empty() {
        return Err(syntax());
    }
    let lower = body.to_ascii_lowercase();
    let (radix, digits) = match lower.as_bytes() {
        [b'0', b'x', _, ..] => (16, &lower[2..]),
        [b'0', b'o', _, ..] => (8, &lower[2..]),
        [b'0', b'b', _, ..] => (2, &lower[2..]),
        [b'0', ..] => (8, &lower[1..]),
        _ => (10, lower.as_str()),
    };
    if digits.contains('_') && !underscores_ok(&lower) {
        return Err(syntax());
    }
    let digits: String = digits.chars().filter(|&c| c != '_').collect();
    // "0" alone is octal with no digits left: zero.
    let magnitude = if digits.is_empty() && radix == 8 && lower == "0" {
        0
    } else {
        u64::from_str_radix(&digits, radix).map_err(|_| syntax())?
    };
    let limit = 1u64 << 63;
    match (negative, magnitude) {
        (false, m) if m < limit => Ok(m as i64),
        (true, m) if m <= limit => Ok((m as i64).wrapping_neg()),
        _ => Err("out of range for a 64-bit integer".into()),
    }
}

/// Go's rule for `_` in a base-0 integer: only between digits (a base prefix counts as one).
fn underscores_ok(lower: &str) -> bool {
    let bytes = lower.as_bytes();
    let (mut i, mut last, hex) = match bytes {
        [b'0', p @ (b'b' | b'o' | b'x'), ..] => (2, b'0', *p == b'x'),
        _ => (0, b'^', false),
    };
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_digit() || (hex && (b'a'..=b'f').contains(&c)) {
            last = b'0';
        } else if c == b'_' {
            if last != b'0' {
                return false;
            }
            last = b'_';
        } else if last == b'_' {
            return false;
        } else {
            last = b'!';
        }
        i += 1;
    }
    last != b'_'
}

/// A float as Go's `strconv.ParseFloat` reads the usual forms (`0.8`, `1e-3`, `.5`).
pub fn go_float(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .map_err(|_| "not a number".to_string())
        .and_then(|v| {
            if v.is_finite() {
                Ok(v)
            } else {
                Err("not a finite number".to_string())
            }
        })
}

/// envconfig's map: `k1:v1,k2:v2`, each pair exactly one `:`, nothing trimmed; an empty or blank
/// value is an empty map.
pub fn go_map(text: &str) -> Result<Vec<(String, String)>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|pair| match pair.split(':').collect::<Vec<_>>()[..] {
            [k, v] => Ok((k.to_string(), v.to_string())),
            _ => Err(format!(
                "invalid map item {pair:?} (write key:value,key:value)"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's ParseBool: exactly its twelve spellings; the empty string is an error.
    #[test]
    fn booleans_are_go_booleans() {
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(go_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(go_bool(no), Ok(false), "{no}");
        }
        for bad in ["", "yes", "on", "tRUE", " true", "2"] {
            assert!(go_bool(bad).is_err(), "{bad:?}");
        }
    }

    /// ParseInt base 0: decimal, hex, octal (0o and a leading 0), binary, signs, underscores
    /// between digits, and the 64-bit range.
    #[test]
    fn integers_read_every_base() {
        for (text, want) in [
            ("8080", 8080),
            ("+7", 7),
            ("-7", -7),
            ("0", 0),
            ("0x1F", 31),
            ("0X1f", 31),
            ("017", 15),
            ("0o17", 15),
            ("0b101", 5),
            ("1_000", 1000),
            ("0x_1F", 31),
            ("0_7", 7),
            ("9223372036854775807", i64::MAX),
            ("-9223372036854775808", i64::MIN),
        ] {
            assert_eq!(go_int(text), Ok(want), "{text}");
        }
        for bad in [
            "",
            "-",
            "0x",
            "08",
            "1__0",
            "_1",
            "1_",
            "1.5",
            " 1",
            "9223372036854775808",
            "0xg",
        ] {
            assert!(go_int(bad).is_err(), "{bad:?} -> {:?}", go_int(bad));
        }
    }

    /// Maps split pairs on one `:` each and trim nothing.
    #[test]
    fn maps_and_lists() {
        assert_eq!(
            go_map("a:1,b: 2"),
            Ok(vec![("a".into(), "1".into()), ("b".into(), " 2".into())])
        );
        assert_eq!(go_map(""), Ok(vec![]));
        assert!(go_map("a").is_err());
        assert!(go_map("a:b:c").is_err());
        assert!(go_map("a:1,").is_err());
    }

    /// Absent variables take the default; set ones are parsed as written, empty included, and
    /// the error names the variable and its value.
    #[test]
    fn absent_means_default_and_empty_is_an_error() {
        let env = Env::from_pairs([("PORT", ""), ("GRPC_PORT", "0x1F91"), ("AGE", "1m30s")]);
        assert_eq!(env.int("GRPC_PORT", 1), Ok(8081));
        assert_eq!(env.int("DEBUG_PORT", 6070), Ok(6070));
        let error = env.int("PORT", 8080).unwrap_err();
        assert_eq!(error.to_string(), "PORT=\"\": not an integer (empty)");
        assert_eq!(
            env.duration("AGE", Duration::ZERO),
            Ok(Duration::from_secs(90))
        );
        assert!(env.bool("AGE", false).is_err());
        assert_eq!(env.string("HOST", "0.0.0.0"), "0.0.0.0");
        assert!(env.float("AGE", 0.8).is_err());
        assert_eq!(env.float("RATIO", 0.8), Ok(0.8));
    }
}
