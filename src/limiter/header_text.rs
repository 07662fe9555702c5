//! A response header's value kept as its parts (the rule's shared policy text, numbers) and
//! written out only where it leaves the process: no heap block and no formatting per call.

use std::fmt;
use std::sync::Arc;

/// The value of one response header.
#[derive(Debug, Clone)]
pub enum HeaderText {
    /// A fixed text (`no-store`, `degraded`).
    Static(&'static str),
    /// Text compiled with the rules (a limit's `RateLimit-Policy` item), shared, not copied.
    Shared(Arc<str>),
    /// A whole number in decimal (`Retry-After`, envoyproxy/ratelimit's three headers).
    Number(u64),
    /// The draft-10 `RateLimit` item.
    Current(RateLimitItem),
}

/// The draft-10 `RateLimit` item: a policy's quoted name, then `;r=<remaining>;t=<seconds>`.
/// Built only from a policy, so the name's end is always one of its character boundaries.
#[derive(Debug, Clone)]
pub struct RateLimitItem {
    /// The compiled policy item the name is taken from.
    policy: Arc<str>,
    /// Length of the quoted name at the start of `policy`.
    name_len: usize,
    /// Requests left.
    remaining: u32,
    /// Whole seconds until reset.
    reset: u64,
}

impl RateLimitItem {
    /// The item for `policy` (`"<name>";q=<n>;w=<s>`, shared, not copied).
    pub fn new(policy: &Arc<str>, remaining: u32, reset: u64) -> Self {
        Self {
            policy: Arc::clone(policy),
            name_len: policy_name(policy).len(),
            remaining,
            reset,
        }
    }

    fn name(&self) -> &[u8] {
        &self.policy.as_bytes()[..self.name_len]
    }
}

/// The quoted name that starts a policy item `<quoted name>;q=<n>;w=<s>` (the RateLimit item
/// repeats it). The name may hold `;`, the two parameters after it cannot, so it ends at the
/// second `;` from the right: a plain scan of the short tail, where a substring or `char`
/// search cost more than the rest of the headers.
fn policy_name(policy: &str) -> &str {
    let mut separators = policy.bytes().enumerate().rev().filter(|&(_, b)| b == b';');
    match (separators.next(), separators.next()) {
        // `;` is ASCII, so the name ends on a character boundary.
        (Some(_), Some((at, _))) => &policy[..at],
        _ => policy,
    }
}

impl HeaderText {
    /// The value's length in bytes, without writing it.
    pub fn len(&self) -> usize {
        match self {
            Self::Static(text) => text.len(),
            Self::Shared(text) => text.len(),
            Self::Number(n) => decimal_len(*n),
            Self::Current(item) => {
                item.name().len()
                    + ";r=".len()
                    + decimal_len(u64::from(item.remaining))
                    + ";t=".len()
                    + decimal_len(item.reset)
            }
        }
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Hands the value's bytes to `out`, in order, in one or more pieces.
    pub fn write(&self, mut out: impl FnMut(&[u8])) {
        match self {
            Self::Static(text) => out(text.as_bytes()),
            Self::Shared(text) => out(text.as_bytes()),
            Self::Number(n) => out(itoa::Buffer::new().format(*n).as_bytes()),
            Self::Current(item) => {
                out(item.name());
                out(b";r=");
                out(itoa::Buffer::new().format(item.remaining).as_bytes());
                out(b";t=");
                out(itoa::Buffer::new().format(item.reset).as_bytes());
            }
        }
    }
}

impl HeaderText {
    /// Whether the value's text is `text`, compared piece by piece.
    fn reads(&self, text: &str) -> bool {
        let mut rest = Some(text.as_bytes());
        self.write(|piece| rest = rest.and_then(|r| r.strip_prefix(piece)));
        rest.is_some_and(<[u8]>::is_empty)
    }
}

impl fmt::Display for HeaderText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut result = Ok(());
        self.write(|piece| {
            // Every piece is a whole `str` or ASCII digits and separators.
            if result.is_ok() {
                result = f.write_str(std::str::from_utf8(piece).unwrap_or_default());
            }
        });
        result
    }
}

/// Values are equal when their text is, however they are held.
impl PartialEq for HeaderText {
    fn eq(&self, other: &Self) -> bool {
        self.reads(&other.to_string())
    }
}

impl Eq for HeaderText {}

impl PartialEq<&str> for HeaderText {
    fn eq(&self, other: &&str) -> bool {
        self.reads(other)
    }
}

impl From<&'static str> for HeaderText {
    fn from(text: &'static str) -> Self {
        Self::Static(text)
    }
}

/// Digits of `n` in decimal.
fn decimal_len(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(text: &HeaderText) -> String {
        let mut bytes = Vec::new();
        text.write(|piece| bytes.extend_from_slice(piece));
        String::from_utf8(bytes).expect("utf-8")
    }

    /// Every kind writes exactly `len()` bytes, and its text is what `Display` shows.
    #[test]
    fn length_matches_the_bytes_written() {
        let policy: Arc<str> = Arc::from("\"edge.api_key\";q=100;w=60");
        let values = [
            HeaderText::Static("no-store"),
            HeaderText::Static(""),
            HeaderText::Shared(policy.clone()),
            HeaderText::Number(0),
            HeaderText::Number(9),
            HeaderText::Number(10),
            HeaderText::Number(u64::MAX),
            HeaderText::Current(RateLimitItem::new(&policy, u32::MAX, 1)),
        ];
        for value in &values {
            assert_eq!(written(value).len(), value.len(), "{value:?}");
            assert_eq!(written(value), value.to_string());
        }
        assert_eq!(values[7], "\"edge.api_key\";r=4294967295;t=1");
        assert_eq!(values[6], "18446744073709551615");
    }

    /// Equality is by text: a number equals the static text of its digits.
    #[test]
    fn equal_by_text() {
        assert_eq!(HeaderText::Number(58), HeaderText::Static("58"));
        assert_ne!(HeaderText::Number(58), HeaderText::Static("59"));
    }
}
