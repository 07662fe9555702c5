//! YAML scalars resolved the way envoyproxy/ratelimit's YAML library (go-yaml v2, YAML 1.1)
//! resolves them for an untyped target, so that `yes`, `0x1f` or `1e3` mean in sluice what they
//! mean envoyproxy/ratelimit.

/// A scalar as written.
#[derive(Debug, Clone)]
pub(crate) struct Scalar {
    /// The text (quotes and escapes already processed).
    pub text: String,
    /// Plain (unquoted, not a block scalar): only plain scalars resolve to null/bool/int/float.
    pub plain: bool,
    /// The core-schema tag suffix of an explicit tag (`str`, `int`, ...), or `!` for a
    /// non-specific tag; `None` when untagged or tagged with a custom tag.
    pub tag: Option<String>,
}

/// A resolved scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'a> {
    /// `~`, `null`, or nothing at all.
    Null,
    /// YAML 1.1 booleans (`true`, `yes`, `on`, ...).
    Bool(bool),
    /// An integer in YAML 1.1 syntax (`10`, `0x1f`, `0o17`, `1_000`), within i64/u64 range.
    Int(i128),
    /// A float, or an integer too large for 64 bits (as go-yaml resolves it).
    Float,
    /// Anything else, and every quoted or block scalar.
    Str(&'a str),
}

impl Scalar {
    /// Resolves the scalar as go-yaml v2 does for an untyped target.
    pub fn resolve(&self) -> Value<'_> {
        let text = self.text.as_str();
        match self.tag.as_deref() {
            Some("str" | "binary" | "!") => return Value::Str(text),
            Some("null") => return Value::Null,
            Some("float") => return Value::Float,
            Some("bool") => return parse_bool(text).map_or(Value::Str(text), Value::Bool),
            Some("int") => return parse_int(text).unwrap_or(Value::Str(text)),
            _ => {}
        }
        if !self.plain {
            return Value::Str(text);
        }
        if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
            return Value::Null;
        }
        if let Some(b) = parse_bool(text) {
            return Value::Bool(b);
        }
        if let Some(v) = parse_int(text) {
            return v;
        }
        if is_float(text) {
            return Value::Float;
        }
        Value::Str(text)
    }
}

/// YAML 1.1 booleans, as go-yaml v2 accepts them.
fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            Some(true)
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            Some(false)
        }
        _ => None,
    }
}

/// YAML 1.1 integers: sign, `0x`/`0o`/`0b` or a leading-zero octal, `_` separators. Values
/// beyond 64 bits come back as [`Value::Float`], as go-yaml falls back to a float for them.
fn parse_int(text: &str) -> Option<Value<'static>> {
    let cleaned: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, digits) = match cleaned.as_bytes().first() {
        Some(b'-') => (true, &cleaned[1..]),
        Some(b'+') => (false, &cleaned[1..]),
        _ => (false, cleaned.as_str()),
    };
    let (radix, body) = if let Some(rest) = digits.strip_prefix("0x") {
        (16, rest)
    } else if let Some(rest) = digits.strip_prefix("0o") {
        (8, rest)
    } else if let Some(rest) = digits.strip_prefix("0b") {
        (2, rest)
    } else if digits.len() > 1 && digits.starts_with('0') {
        (8, &digits[1..])
    } else {
        (10, digits)
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let Ok(magnitude) = u128::from_str_radix(body, radix) else {
        return Some(Value::Float);
    };
    let value = if negative {
        -(i128::try_from(magnitude).ok()?)
    } else {
        i128::try_from(magnitude).ok()?
    };
    if value < i128::from(i64::MIN) || value > i128::from(u64::MAX) {
        return Some(Value::Float);
    }
    Some(Value::Int(value))
}

/// go-yaml v2's float syntax: `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?` and the
/// `.inf`/`.nan` spellings.
fn is_float(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") || matches!(text, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => digits(frac),
        Some((int, frac)) => digits(int) && (frac.is_empty() || digits(frac)),
        None => digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| digits(e.strip_prefix(['-', '+']).unwrap_or(e)));
    mantissa_ok && exponent_ok
}
