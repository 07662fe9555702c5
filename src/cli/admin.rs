//! `sluice serve` flags of the admin listener (counters inspected and reset): its address and
//! the bearer-token file. Off unless `--admin-addr` is given, which needs the token file.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use sluice::app::{AdminSettings, Settings};

/// Admin listener flags.
#[derive(Debug, Args)]
pub struct AdminArgs {
    /// Serve the admin listener here (GET/DELETE /counters: a descriptor's counters inspected
    /// and reset); off unless given. Requires --admin-token-file.
    #[arg(long, env = "SLUICE_ADMIN_ADDR", requires = "admin_token_file")]
    pub admin_addr: Option<SocketAddr>,
    /// The admin listener's bearer tokens, one a line: `name:token` (the name is what the
    /// audit line shows), or a bare token named `default`; `#` comments. Reloaded when the
    /// file changes.
    #[arg(long, env = "SLUICE_ADMIN_TOKEN_FILE", requires = "admin_addr")]
    pub admin_token_file: Option<PathBuf>,
}

impl AdminArgs {
    /// Writes these flags into `settings`.
    pub fn apply(&self, settings: &mut Settings) {
        settings.admin = match (self.admin_addr, &self.admin_token_file) {
            (Some(addr), Some(token_file)) => Some(AdminSettings {
                addr,
                token_file: token_file.clone(),
            }),
            // clap makes the two come together.
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    fn serve(args: &[&str]) -> Result<Box<crate::cli::serve::ServeArgs>, clap::Error> {
        let argv = ["sluice", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// Off by default; the address needs the token file (and the file the address).
    #[test]
    fn the_listener_needs_its_token_file() {
        assert!(serve(&[]).unwrap().settings().admin.is_none());
        let on = serve(&["--admin-addr", "127.0.0.1:9901", "--admin-token-file", "t"]).unwrap();
        let admin = on.settings().admin.expect("admin listener");
        assert_eq!(admin.addr.port(), 9901);
        let error = serve(&["--admin-addr", "127.0.0.1:9901"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("--admin-token-file"), "{error}");
        assert!(serve(&["--admin-token-file", "t"]).is_err());
    }
}
