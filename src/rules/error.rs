//! Load errors: one [`ConfigError`] per problem, each with the file, line and column it is about.

use super::Location;

/// One problem found while loading rule files, at the node it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct ConfigError {
    /// Where: the file, and the line and column of the offending node when YAML gives them.
    pub location: Location,
    /// What, in envoyproxy/ratelimit's words where envoyproxy/ratelimit has a message for it.
    pub message: String,
}

impl ConfigError {
    /// An error about a whole file or path (no line or column).
    pub(super) fn in_file(file: &std::path::Path, message: impl Into<String>) -> Self {
        Self::at(file, None, message)
    }

    /// An error at a 1-based `(line, col)` of `file`, when known. Line 0 means "no position"
    /// (rules given as data, not text), so the error prints as `<file>: <message>`.
    pub(super) fn at(
        file: &std::path::Path,
        pos: Option<(usize, usize)>,
        message: impl Into<String>,
    ) -> Self {
        let pos = pos.filter(|&(line, _)| line > 0);
        Self {
            location: Location {
                file: file.to_path_buf(),
                line: pos.map(|p| p.0),
                col: pos.map(|p| p.1),
            },
            message: message.into(),
        }
    }
}

/// Every problem of one load, in file order and, within a file, in position order.
///
/// A load is all or nothing: any error rejects the whole rule set, so all of them are reported at
/// once rather than one per attempt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The errors, in report order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    /// How many errors there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none (never the case for an `Err` of a load).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// An error prints as `file:line:col: message`, and without line/col when they are unknown.
    #[test]
    fn display_with_and_without_position() {
        let a = ConfigError::at(Path::new("a.yaml"), Some((3, 7)), "boom");
        let b = ConfigError::in_file(Path::new("b.yaml"), "missing");
        assert_eq!(a.to_string(), "a.yaml:3:7: boom");
        assert_eq!(b.to_string(), "b.yaml: missing");
        let all = ConfigErrors(vec![a, b]);
        assert_eq!(all.to_string(), "a.yaml:3:7: boom\nb.yaml: missing");
        assert_eq!(all.len(), 2);
    }
}
