//! The admin listener from a test: a token file, a server started with the listener on, and
//! `/counters` requests with or without a bearer token.

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::Value;
use sluice::app::AdminSettings;
use sluice::store::Store;

use super::TestServer;

/// A token of the test token file, named `alice`.
pub const TOKEN: &str = "a11ce0000000000000000000000000000000000000000000000000000000000a";
/// Another valid token, named `bob`.
pub const OTHER_TOKEN: &str = "b0b0000000000000000000000000000000000000000000000000000000000b0b";

/// The token file's text: alice's and bob's tokens.
pub fn token_file() -> String {
    format!("# test operators\nalice:{TOKEN}\nbob:{OTHER_TOKEN}\n")
}

/// A server on `store` with `yaml` and the admin listener on port 0, its tokens in the rules
/// directory's `tokens` file (outside the rule files it reads: not `*.yaml`).
pub async fn start(yaml: &str, store: Arc<dyn Store>) -> TestServer {
    TestServer::start_adjusted(yaml, store, |s| {
        let rules = s.config[0].clone();
        let file = rules.join("tokens");
        std::fs::write(&file, token_file()).expect("token file");
        s.admin = Some(AdminSettings {
            addr: "127.0.0.1:0".parse().unwrap(),
            token_file: file,
        });
    })
    .await
}

/// An answer of the admin listener.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// The response head, lower-cased.
    pub head: String,
    pub body: Value,
}

/// `method /counters?<query>` with `token` as the bearer token, if any.
pub async fn request(addr: SocketAddr, method: &str, query: &str, token: Option<&str>) -> Answer {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect admin");
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!("{method} /counters?{query} HTTP/1.0\r\nHost: test\r\n{auth}\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.expect("read");
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status line");
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: serde_json::from_str(body).unwrap_or(Value::Null),
    }
}

/// `GET /counters` with alice's token.
pub async fn get(server: &TestServer, query: &str) -> Answer {
    request(
        server.admin_addr.expect("admin on"),
        "GET",
        query,
        Some(TOKEN),
    )
    .await
}

/// `DELETE /counters` with alice's token.
pub async fn reset(server: &TestServer, query: &str) -> Answer {
    request(
        server.admin_addr.expect("admin on"),
        "DELETE",
        query,
        Some(TOKEN),
    )
    .await
}
