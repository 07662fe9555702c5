//! Re-reading the rule files, the TLS files and the admin token file on demand: what SIGHUP asks
//! of a running server.

use std::sync::Arc;

use crate::admin::Tokens;
use crate::reload::Reloader;
use crate::tls::ServerTls;

/// The server's file-backed configuration, re-read on request (the watchers do the same on a
/// change; this is for an operator who asks, or a file system whose events are lost).
#[derive(Clone)]
pub struct FileReload {
    pub(super) reloader: Arc<Reloader>,
    pub(super) tls: Option<ServerTls>,
    pub(super) admin: Option<Tokens>,
}

impl FileReload {
    /// Re-reads the rule files (rules from xDS are the control plane's to push: nothing to read)
    /// the TLS certificate files and the admin token file. Each keeps what serves when its files
    /// are invalid, and logs why, as a watched change does.
    pub async fn now(&self) {
        let reloader = self.reloader.clone();
        // Compiling rules reads files: keep it off the runtime's request workers.
        let rules = tokio::task::spawn_blocking(move || reloader.reload())
            .await
            .unwrap_or(false);
        let tls = self.tls.as_ref().map(ServerTls::reload);
        if let Some(tokens) = &self.admin {
            tokens.reload();
        }
        tracing::info!(
            rules_replaced = rules,
            rule_generation = self.reloader.generation(),
            tls = tls.map(|outcome| format!("{outcome:?}")),
            "reload requested"
        );
    }
}
