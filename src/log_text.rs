//! Text that others chose (a client's descriptor, a control plane's version, a peer's error)
//! made safe for a log line: escaped and bounded, in the text and the JSON formats alike.
//!
//! Why: the text format writes a `%field` as it is, so a descriptor value holding a newline
//! forged a whole log line (a fake `sluice::audit` reset, say) and an ANSI escape reached the
//! operator's terminal raw; and a 64 KiB descriptor made a 64 KiB line. Wrapped in [`LogText`],
//! such a value is one token of one line: control characters, quotes and backslashes are
//! escaped as Rust writes them (`\n`, `\u{1b}`, `\"`), a value holding whitespace, a quote or
//! nothing at all is quoted (logfmt's rule: `descriptor="a b"`, never a second field), and past
//! [`MAX_CHARS`] characters the rest is replaced by how many bytes were left out.

use std::fmt::{self, Write};

/// The most characters of one value a log line shows.
pub const MAX_CHARS: usize = 512;

/// A value from outside, for a log field: `%LogText(&value)`.
#[derive(Debug, Clone, Copy)]
pub struct LogText<'a>(pub &'a str);

impl fmt::Display for LogText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0;
        let quoted = text.is_empty()
            || text
                .chars()
                .any(|c| c.is_whitespace() || c == '"' || c == '\\' || needs_escape(c));
        if quoted {
            f.write_char('"')?;
        }
        for (shown, (at, c)) in text.char_indices().enumerate() {
            if shown == MAX_CHARS {
                write!(f, "…({} more bytes)", text.len() - at)?;
                break;
            }
            match c {
                '"' | '\\' => {
                    f.write_char('\\')?;
                    f.write_char(c)?;
                }
                c if needs_escape(c) => write!(f, "{}", c.escape_default())?,
                c => f.write_char(c)?,
            }
        }
        if quoted {
            f.write_char('"')?;
        }
        Ok(())
    }
}

/// `text` cut after [`MAX_CHARS`] characters, saying how many bytes were left out: for a
/// field written with `?` (Debug), which escapes but does not bound.
pub fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    match text.char_indices().nth(MAX_CHARS) {
        None => text.into(),
        Some((at, _)) => format!("{}…({} more bytes)", &text[..at], text.len() - at).into(),
    }
}

/// Characters that must not reach a log line as they are: C0 and C1 controls (newlines, ESC,
/// BEL, DEL…) and the Unicode line and paragraph separators, which some viewers break lines on.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plain values stay as they are; newlines, ESC, quotes and backslashes are escaped and
    /// the value quoted, so it can neither end the line nor pass for another field.
    #[test]
    fn control_characters_are_escaped_and_quoted() {
        for (text, shown) in [
            ("user=alice,plan=gold", "user=alice,plan=gold"),
            (
                "x\n2026 INFO sluice::audit: counters reset \u{1b}[31m",
                r#""x\n2026 INFO sluice::audit: counters reset \u{1b}[31m""#,
            ),
            ("a b", r#""a b""#),
            (r#"say "hi" \ bye"#, r#""say \"hi\" \\ bye""#),
            ("", r#""""#),
            ("\u{9b}\u{2028}", r#""\u{9b}\u{2028}""#),
            ("café", "café"),
        ] {
            assert_eq!(LogText(text).to_string(), shown, "{text:?}");
        }
    }

    /// Past the bound the rest is counted, not shown, whatever the characters' widths.
    #[test]
    fn long_values_are_cut_with_the_bytes_left_out() {
        let long = "é".repeat(MAX_CHARS + 10);
        let shown = LogText(&long).to_string();
        assert_eq!(shown, format!("{}…(20 more bytes)", "é".repeat(MAX_CHARS)));
        let exact = "a".repeat(MAX_CHARS);
        assert_eq!(LogText(&exact).to_string(), exact);
        assert_eq!(cut(&exact), exact);
        assert_eq!(cut(&long), shown);
    }
}
