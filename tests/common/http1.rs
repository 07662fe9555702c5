//! A minimal HTTP/1.1 client over `std::net::TcpStream`, and a tiny upstream that answers 200.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// A parsed response.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Header names (lower-cased) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The value of header `name`, or a panic that shows the whole response.
    pub fn expect_header(&self, name: &str) -> &str {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header in {self:#?}"))
    }
}

/// `GET path` with extra `headers`, on a fresh connection from the default source address.
pub fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Response {
    try_get(addr, path, headers).unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"))
}

/// As [`get`], returning connection and I/O errors instead of panicking.
pub fn try_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Response> {
    exchange(TcpStream::connect(addr)?, "GET", path, headers, "")
}

/// `POST path` with extra `headers` and `body` (its `Content-Length` added), on a fresh
/// connection.
pub fn post(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Response {
    TcpStream::connect(addr)
        .and_then(|stream| exchange(stream, "POST", path, headers, body))
        .unwrap_or_else(|e| panic!("POST {addr}{path}: {e}"))
}

/// `GET path` on a connection made from the loopback address `source` (e.g. 127.0.0.2), so
/// the server sees a different client address.
pub fn get_from(
    source: IpAddr,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Response {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let stream = runtime
        .block_on(async {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(source, 0))?;
            socket.connect(addr).await
        })
        .and_then(|s| s.into_std())
        .unwrap_or_else(|e| panic!("connect {source} -> {addr}: {e}"));
    stream.set_nonblocking(false).expect("blocking socket");
    exchange(stream, "GET", path, headers, "").unwrap_or_else(|e| panic!("GET {addr}{path}: {e}"))
}

fn exchange(
    mut stream: TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<Response> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: sluice.test\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method != "GET" {
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    Ok(parse(&String::from_utf8_lossy(&raw)))
}

fn parse(raw: &str) -> Response {
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    Response {
        status,
        headers,
        body: if chunked {
            dechunk(body)
        } else {
            body.to_owned()
        },
    }
}

/// The payload of a chunked body: hex size line, data, CRLF; a zero size ends it.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16);
        match size {
            Ok(n) if n > 0 && rest.len() >= n => {
                out.push_str(&rest[..n]);
                body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
            }
            _ => break,
        }
    }
    out
}

/// An HTTP/1.1 server on a loopback port that answers every request `200 ok` (keep-alive) and
/// counts the requests it saw. Stops accepting when dropped.
pub struct Upstream {
    /// Where it listens.
    pub addr: SocketAddr,
    hits: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Upstream {
    /// Starts the server on a free port.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let hits = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (counter, stopped) = (hits.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    let counter = counter.clone();
                    std::thread::spawn(move || serve_connection(stream, &counter));
                }
            }
        });
        Self { addr, hits, stop }
    }

    /// How many requests reached the upstream.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Answers requests (no bodies expected) on one connection until the peer closes it.
fn serve_connection(stream: TcpStream, hits: &AtomicU64) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        // Read one request head: lines up to the empty one.
        let mut started = false;
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" && started => break,
                Ok(_) => started = true,
            }
        }
        hits.fetch_add(1, Ordering::SeqCst);
        let reply = "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nok\n";
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}
