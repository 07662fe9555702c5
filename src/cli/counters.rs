//! `sluice counters get|reset`: a client of the admin listener's `/counters` (see
//! docs/admin.md). It sends one request over plain HTTP/1.1 (hyper's client, already in the
//! tree), prints the JSON answer, and fails with the server's own message on a refusal.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use http::{Method, Request, StatusCode, header};
use hyper_util::rt::TokioIo;
use sluice::limiter::parse_descriptor;

/// How long the whole exchange may take: connecting, sending, reading the answer.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The largest answer read (a descriptor's counters are a few kilobytes).
const MAX_ANSWER_BYTES: usize = 4 << 20;
/// The largest token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 1 << 20;

/// Flags of `sluice counters`.
#[derive(Debug, Args)]
pub struct CountersArgs {
    /// What to do with the descriptor's counters.
    #[command(subcommand)]
    pub action: CountersAction,
}

/// `get` or `reset`.
#[derive(Debug, Subcommand)]
pub enum CountersAction {
    /// Print what a descriptor's counters hold (GET /counters): every limit, every shard.
    Get(AdminTarget),
    /// Reset every counter of a descriptor (DELETE /counters) and print what was reset.
    Reset(AdminTarget),
}

/// Which admin listener, with which token, and which descriptor.
#[derive(Debug, Args)]
pub struct AdminTarget {
    /// The admin listener, e.g. `http://127.0.0.1:9901` (it speaks plain HTTP).
    #[arg(long, value_name = "URL")]
    pub admin: String,
    /// A file holding the bearer token: the server's token file format (`name:token` or a bare
    /// token a line, `#` comments); with more than one token, --token-name picks one.
    #[arg(long, value_name = "FILE")]
    pub token_file: PathBuf,
    /// Which token of --token-file to send, by name.
    #[arg(long, value_name = "NAME")]
    pub token_name: Option<String>,
    /// The domain.
    #[arg(long)]
    pub domain: String,
    /// The descriptor, `key=value[,key=value]` outermost first.
    #[arg(long, value_parser = descriptor)]
    pub descriptor: String,
}

/// Checks a `--descriptor` as the server will read it, so a typo fails before any request.
fn descriptor(text: &str) -> Result<String, String> {
    parse_descriptor(text).map(|_| text.to_owned())
}

/// Sends the request and prints the answer (pretty JSON) to `out`; a refusal is an error
/// carrying the server's message and status.
pub fn run(args: &CountersArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    let (method, target) = match &args.action {
        CountersAction::Get(target) => (Method::GET, target),
        CountersAction::Reset(target) => (Method::DELETE, target),
    };
    let token = read_token(&target.token_file, target.token_name.as_deref())?;
    let endpoint = AdminEndpoint::parse(&target.admin)?;
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("domain", &target.domain)
        .append_pair("descriptor", &target.descriptor)
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let exchange = endpoint.send(method, &query, &token);
    let (status, body) = runtime
        .block_on(async { tokio::time::timeout(TIMEOUT, exchange).await })
        .map_err(|_| anyhow!("no answer from {} within {TIMEOUT:?}", target.admin))??;
    let answer: serde_json::Value = serde_json::from_slice(&body).with_context(|| {
        format!(
            "{} answered {status} with a body that is not JSON: {}",
            target.admin,
            String::from_utf8_lossy(&body)
                .chars()
                .take(200)
                .collect::<String>()
        )
    })?;
    if !status.is_success() {
        let message = answer["error"].as_str().unwrap_or("(no message)");
        bail!("{message} (HTTP {status})");
    }
    writeln!(out, "{}", serde_json::to_string_pretty(&answer)?)?;
    Ok(())
}

/// Where the admin listener is: the address to connect to, the `Host` header and a path
/// prefix (a listener behind a proxy path).
#[derive(Debug, PartialEq, Eq)]
struct AdminEndpoint {
    connect: String,
    host: String,
    path: String,
}

impl AdminEndpoint {
    fn parse(text: &str) -> anyhow::Result<Self> {
        let url = url::Url::parse(text)
            .with_context(|| format!("--admin {text}: not a URL (e.g. http://127.0.0.1:9901)"))?;
        match url.scheme() {
            "http" => {}
            "https" => bail!(
                "--admin {text}: the admin listener speaks plain HTTP; reach it through a tunnel \
                 (kubectl port-forward, ssh -L) and give its http:// address"
            ),
            other => bail!("--admin {text}: unknown scheme '{other}' (http://HOST:PORT)"),
        }
        let host = url
            .host_str()
            .ok_or_else(|| anyhow!("--admin {text}: no host"))?;
        let port = url.port().unwrap_or(80);
        Ok(Self {
            connect: format!("{host}:{port}"),
            host: format!("{host}:{port}"),
            path: format!("{}/counters", url.path().trim_end_matches('/')),
        })
    }

    /// One request on a fresh connection; the status and the body.
    async fn send(
        &self,
        method: Method,
        query: &str,
        token: &str,
    ) -> anyhow::Result<(StatusCode, bytes::Bytes)> {
        let stream = tokio::net::TcpStream::connect(&self.connect)
            .await
            .with_context(|| format!("cannot connect to the admin listener at {}", self.connect))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("HTTP handshake with the admin listener")?;
        tokio::spawn(connection);
        let request = Request::builder()
            .method(method)
            .uri(format!("{}?{query}", self.path))
            .header(header::HOST, &self.host)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(String::new())?;
        let response = sender
            .send_request(request)
            .await
            .context("sending the request to the admin listener")?;
        let status = response.status();
        let body = axum::body::to_bytes(
            axum::body::Body::new(response.into_body()),
            MAX_ANSWER_BYTES,
        )
        .await
        .map_err(|e| anyhow!("reading the admin listener's answer: {e}"))?;
        Ok((status, body))
    }
}

/// The token to send: the only one of the file, or the one named `name`.
fn read_token(path: &Path, name: Option<&str>) -> anyhow::Result<String> {
    let text = read_small(path).with_context(|| format!("cannot read {}", path.display()))?;
    let tokens = parse_tokens(&text);
    let found = match name {
        Some(name) => tokens
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| anyhow!("{} holds no token named '{name}'", path.display()))?,
        None => match tokens.as_slice() {
            [only] => only,
            [] => bail!("{} holds no token", path.display()),
            many => bail!(
                "{} holds {} tokens: name one with --token-name ({})",
                path.display(),
                many.len(),
                many.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        },
    };
    Ok(found.1.to_owned())
}

/// Reads a file of at most [`MAX_TOKEN_FILE_BYTES`].
fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_TOKEN_FILE_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// The `(name, token)` lines of a token file, as the server reads them (`name:token`, or a
/// bare token named `default`); the server checks them, the client only sends one.
fn parse_tokens(text: &str) -> Vec<(&str, &str)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| line.split_once(':').unwrap_or(("default", line)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The only token, or the one named; several without a name, or none, are errors.
    #[test]
    fn the_token_is_picked_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("t");
        std::fs::write(&file, "# ops\nalice:aaaa\n\nbob:bbbb\n").unwrap();
        assert_eq!(read_token(&file, Some("bob")).unwrap(), "bbbb");
        let many = read_token(&file, None).unwrap_err().to_string();
        assert!(
            many.contains("2 tokens") && many.contains("alice, bob"),
            "{many}"
        );
        assert!(read_token(&file, Some("carol")).is_err());
        std::fs::write(&file, "  cccc  \n").unwrap();
        assert_eq!(read_token(&file, None).unwrap(), "cccc");
        assert_eq!(read_token(&file, Some("default")).unwrap(), "cccc");
        std::fs::write(&file, "# none\n").unwrap();
        assert!(read_token(&file, None).is_err());
    }

    /// Plain HTTP only, with a default port and an optional path prefix.
    #[test]
    fn the_admin_url() {
        let e = AdminEndpoint::parse("http://127.0.0.1:9901").unwrap();
        assert_eq!(
            (e.connect.as_str(), e.path.as_str()),
            ("127.0.0.1:9901", "/counters")
        );
        let e = AdminEndpoint::parse("http://admin.local/sluice/").unwrap();
        assert_eq!(
            (e.connect.as_str(), e.path.as_str()),
            ("admin.local:80", "/sluice/counters")
        );
        let e = AdminEndpoint::parse("http://[::1]:9901").unwrap();
        assert_eq!(e.connect, "[::1]:9901");
        for bad in ["https://x:1", "ftp://x", "127.0.0.1:9901", "nonsense"] {
            assert!(AdminEndpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
