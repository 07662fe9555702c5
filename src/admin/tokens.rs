//! The admin listener's bearer tokens: read from `--admin-token-file`, compared in constant
//! time, reloaded when the file changes.
//!
//! The file holds one token a line, `name:token`, or a bare `token` (named `default`); blank
//! lines and lines starting with `#` are skipped. The name is what the audit line says made a
//! reset (a person, a team, a tool), so names are unique; so are tokens. A token is at least
//! [`MIN_TOKEN_BYTES`] bytes with no whitespace (a token holding `:` must be named).
//!
//! The file's mode is checked on the descriptor read: a file others may write is refused (at
//! start the listener does not start; on reload the tokens in force stay), since whoever can
//! write it can let themselves in. A file every user may read is accepted with one warning: a
//! Kubernetes Secret is mounted `0644` unless its `defaultMode` says otherwise, and inside a
//! container of one user that reaches no one; elsewhere it shows the tokens to every user.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::watch::{Changes, DirectoryRule};

/// The shortest token accepted: 128 bits written in hex.
pub const MIN_TOKEN_BYTES: usize = 32;
/// The largest token file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The name of a bare token.
pub const DEFAULT_NAME: &str = "default";
/// Quiet time after a change of the file before it is read again.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("cannot read admin token file {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// A line is not a token.
    #[error("admin token file {}:{line}: {problem}", path.display())]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        problem: String,
    },
    /// Users other than the owner may write the file (`mode`: its permission bits).
    #[error(
        "admin token file {} may be written by {} (mode {mode:04o}): whoever can write it can let \
         themselves in; make it writable by its owner only (chmod go-w; in Kubernetes, the \
         Secret volume's defaultMode 0440 or 0400)",
        path.display(),
        if mode & 0o002 != 0 { "every user" } else { "its group" }
    )]
    Writable {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file holds no token: no one could use the listener.
    #[error(
        "admin token file {} holds no token (one a line: name:token, or a bare token)",
        .0.display()
    )]
    Empty(PathBuf),
    /// The file cannot be watched for changes.
    #[error("cannot watch admin token file {}: {error}", path.display())]
    Watch {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: notify::Error,
    },
}

/// One named token.
struct Token {
    name: Arc<str>,
    secret: Box<[u8]>,
}

/// The tokens in force, swapped whole on reload.
#[derive(Clone)]
pub struct Tokens {
    path: PathBuf,
    current: Arc<ArcSwap<Vec<Token>>>,
    /// Whether the file being readable by every user was warned about (once, until it is not).
    warned_readable: Arc<AtomicBool>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secrets.
        f.debug_struct("Tokens")
            .field("path", &self.path)
            .field("names", &self.names())
            .finish()
    }
}

impl Tokens {
    /// Reads the token file; a file that cannot be read, a bad line or no token at all is an
    /// error (the listener does not start without a token).
    pub fn load(path: &Path) -> Result<Self, TokenError> {
        let (tokens, mode) = read(path)?;
        if tokens.is_empty() {
            return Err(TokenError::Empty(path.to_path_buf()));
        }
        let loaded = Self {
            path: path.to_path_buf(),
            current: Arc::new(ArcSwap::from_pointee(tokens)),
            warned_readable: Arc::default(),
        };
        loaded.note_mode(mode);
        Ok(loaded)
    }

    /// Warns once that every user may read the file (and again if it becomes so anew).
    fn note_mode(&self, mode: u32) {
        let readable = mode & 0o004 != 0;
        if readable && !self.warned_readable.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                file = %self.path.display(),
                mode = %format!("{mode:04o}"),
                "admin token file is readable by every user: harmless in a container of one \
                 user (a Kubernetes Secret's default mode is 0644), elsewhere it shows the \
                 tokens to every user of the machine (chmod o-r)"
            );
        } else if !readable {
            self.warned_readable.store(false, Ordering::Relaxed);
        }
    }

    /// The name of the token `presented` is, if it is one. Every token is compared, each in
    /// constant time, so the time taken tells nothing of which one matched or how much of one.
    pub fn name_of(&self, presented: &[u8]) -> Option<Arc<str>> {
        let tokens = self.current.load();
        let mut found = None;
        for token in tokens.iter() {
            if bool::from(token.secret.ct_eq(presented)) {
                found = Some(token.name.clone());
            }
        }
        found
    }

    /// The token names in force.
    pub fn names(&self) -> Vec<Arc<str>> {
        self.current.load().iter().map(|t| t.name.clone()).collect()
    }

    /// Re-reads the file: a good one replaces the tokens (an empty one refuses everyone, a
    /// way to lock the listener without a restart); one that cannot be read or holds a bad
    /// line keeps the tokens in force. Logged either way.
    pub fn reload(&self) {
        match read(&self.path) {
            Ok((tokens, mode)) => {
                self.note_mode(mode);
                let names: Vec<&str> = tokens.iter().map(|t| &*t.name).collect();
                if tokens.is_empty() {
                    tracing::warn!(file = %self.path.display(), "admin token file holds no token: every admin request is refused");
                } else {
                    tracing::info!(file = %self.path.display(), tokens = ?names, "admin tokens reloaded");
                }
                self.current.store(Arc::new(tokens));
            }
            Err(e) => {
                tracing::error!(error = %e, "admin tokens did not reload; keeping the previous ones")
            }
        }
    }

    /// Reloads the tokens whenever the file changes (the debounced watcher rule and TLS files
    /// use; a Secret's `..data` swap counts), until `shutdown`.
    pub fn watch(
        &self,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<(), TokenError> {
        let inputs = vec![self.path.clone()];
        let mut changes = Changes::start(inputs, DirectoryRule::default(), DEBOUNCE, shutdown)
            .map_err(|error| TokenError::Watch {
                path: self.path.clone(),
                error,
            })?;
        let tokens = self.clone();
        tasks.spawn(async move {
            while changes.changed().await {
                // A small local file: read inline.
                tokens.reload();
            }
        });
        Ok(())
    }
}

/// Reads and parses the token file; its tokens and its permission bits. A file others may
/// write is refused before it is parsed.
fn read(path: &Path) -> Result<(Vec<Token>, u32), TokenError> {
    let (text, mode) =
        crate::files::read_to_string_with_mode(path, MAX_FILE_BYTES).map_err(|error| {
            TokenError::Read {
                path: path.to_path_buf(),
                error,
            }
        })?;
    if mode & 0o022 != 0 {
        return Err(TokenError::Writable {
            path: path.to_path_buf(),
            mode,
        });
    }
    let tokens = parse(&text).map_err(|(line, problem)| TokenError::Line {
        path: path.to_path_buf(),
        line,
        problem,
    })?;
    Ok((tokens, mode))
}

/// The tokens of a token file's text; a bad line as its number and what is wrong.
fn parse(text: &str) -> Result<Vec<Token>, (usize, String)> {
    let mut tokens: Vec<Token> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, secret) = line.split_once(':').unwrap_or((DEFAULT_NAME, line));
        check_name(name).map_err(|p| (number, p))?;
        check_secret(secret).map_err(|p| (number, p))?;
        if tokens.iter().any(|t| &*t.name == name) {
            return Err((number, format!("the name '{name}' is used twice")));
        }
        if tokens.iter().any(|t| *t.secret == *secret.as_bytes()) {
            return Err((number, "this token is used twice".to_owned()));
        }
        tokens.push(Token {
            name: name.into(),
            secret: secret.as_bytes().into(),
        });
    }
    Ok(tokens)
}

fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@');
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        return Err(format!(
            "'{}' is not a token name (1 to 64 of A-Z a-z 0-9 - _ . @)",
            name.escape_debug()
        ));
    }
    Ok(())
}

fn check_secret(secret: &str) -> Result<(), String> {
    if secret.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a token may not hold whitespace or control characters".to_owned());
    }
    if secret.len() < MIN_TOKEN_BYTES {
        // The token itself is never shown.
        return Err(format!(
            "a token must be at least {MIN_TOKEN_BYTES} bytes (this one is {}); e.g. \
             `openssl rand -hex 32`",
            secret.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef";
    const B: &str = "fedcba9876543210fedcba9876543210";

    fn names(text: &str) -> Vec<String> {
        parse(text)
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect()
    }

    /// Named and bare tokens, comments and blank lines.
    #[test]
    fn named_and_bare_tokens() {
        let text = format!("# operators\n\nalice:{A}\n  {B}  \n");
        assert_eq!(names(&text), ["alice", "default"]);
    }

    /// Bad lines name their line and never show the token.
    #[test]
    fn bad_lines_are_located() {
        for (text, line, says) in [
            (format!("ok:{A}\nshort"), 2, "at least 32 bytes"),
            (format!("bad name:{A}"), 1, "not a token name"),
            (format!("a:{A}\na:{B}"), 2, "used twice"),
            (format!("a:{A}\nb:{A}"), 2, "token is used twice"),
            (format!(":{A}"), 1, "not a token name"),
            (
                "a:0123456789abcdef\u{7}0123456789abcdef".to_owned(),
                1,
                "control",
            ),
        ] {
            let Err((at, problem)) = parse(&text) else {
                panic!("{text:?} parsed")
            };
            assert_eq!(at, line, "{text:?}: {problem}");
            assert!(problem.contains(says), "{text:?}: {problem}");
            assert!(!problem.contains(A) && !problem.contains(B), "{problem}");
        }
    }

    /// A presented token is found by its bytes; anything else, a prefix or a longer string,
    /// is not.
    #[test]
    fn tokens_match_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("alice:{A}\nbob:{B}\n")).unwrap();
        let tokens = Tokens::load(&path).unwrap();
        assert_eq!(tokens.name_of(B.as_bytes()).as_deref(), Some("bob"));
        assert_eq!(tokens.name_of(A.as_bytes()).as_deref(), Some("alice"));
        assert!(tokens.name_of(&A.as_bytes()[..31]).is_none());
        assert!(tokens.name_of(format!("{A}0").as_bytes()).is_none());
        assert!(tokens.name_of(b"").is_none());
        assert!(!format!("{tokens:?}").contains(A));
    }

    /// A file without a token, or missing, stops the start; a reload of a bad file keeps the
    /// tokens in force, an empty one refuses everyone.
    #[test]
    fn load_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        assert!(matches!(Tokens::load(&path), Err(TokenError::Read { .. })));
        std::fs::write(&path, "# nobody\n").unwrap();
        assert!(matches!(Tokens::load(&path), Err(TokenError::Empty(_))));
        std::fs::write(&path, format!("alice:{A}\n")).unwrap();
        let tokens = Tokens::load(&path).unwrap();
        std::fs::write(&path, "alice:short\n").unwrap();
        tokens.reload();
        assert!(
            tokens.name_of(A.as_bytes()).is_some(),
            "a bad file changes nothing"
        );
        std::fs::write(&path, format!("bob:{B}\n")).unwrap();
        tokens.reload();
        assert!(tokens.name_of(A.as_bytes()).is_none());
        assert!(tokens.name_of(B.as_bytes()).is_some());
        std::fs::write(&path, "").unwrap();
        tokens.reload();
        assert!(tokens.names().is_empty());
    }
}
