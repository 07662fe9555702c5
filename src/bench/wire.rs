//! gRPC unary calls on raw HTTP/2 (the `h2` crate), without tonic's channel.
//!
//! tonic's `Channel` puts a tower buffer and a background task between every call and its
//! connection; a load generator built on it spends more CPU per call than the server it
//! measures, so the load generator, not the server, was the bottleneck. Here each worker holds
//! a handle to its connection and writes its pre-encoded request straight onto a stream: the
//! client's cost per call is a few hundred nanoseconds above the kernel's.

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use http::{HeaderMap, Method, Request, Uri};
use prost::Message;
use tokio::net::TcpStream;

/// The RLS v3 method every call goes to.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Only the overall code of a `RateLimitResponse`: prost skips every other field without
/// allocating (the statuses and headers cost the client nothing to ignore).
#[derive(Clone, PartialEq, Message)]
struct OverallCode {
    #[prost(int32, tag = "1")]
    overall_code: i32,
}

/// One HTTP/2 connection to the server, shared by the workers assigned to it.
#[derive(Clone)]
pub struct Connection {
    send: SendRequest<Bytes>,
    uri: Uri,
}

/// Opens one HTTP/2 connection to `addr` (`HOST:PORT`) with Nagle off; its I/O runs on a task
/// of its own until every handle is dropped.
pub async fn open(addr: &str) -> Result<Connection, String> {
    let uri: Uri = format!("http://{addr}{PATH}")
        .parse()
        .map_err(|e| format!("not HOST:PORT: {e}"))?;
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .initial_connection_window_size(1 << 24)
        .handshake(tcp)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        // A connection error ends the calls on it, which report it themselves.
        let _ = connection.await;
    });
    Ok(Connection { send, uri })
}

/// A gRPC message frame: the uncompressed flag, the length, then `message` encoded.
pub fn frame(message: &impl Message) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(len as u32);
    message
        .encode(&mut buf)
        .expect("the buffer was sized for the message");
    buf.freeze()
}

impl Connection {
    /// Sends one framed request and returns the response's overall code, or why the call
    /// failed (a gRPC status other than OK, a broken stream, an unreadable answer).
    pub async fn call(&mut self, body: Bytes) -> Result<i32, String> {
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .map_err(|e| e.to_string())?;
        let mut send = self.send.clone().ready().await.map_err(h2_error)?;
        let (response, mut stream) = send.send_request(request, false).map_err(h2_error)?;
        stream.send_data(body, true).map_err(h2_error)?;
        let response = response.await.map_err(h2_error)?;
        let (head, mut body) = response.into_parts();
        // A trailers-only answer (an error) carries its status in the headers.
        check_status(&head.headers)?;
        let mut message = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.map_err(h2_error)?;
            let _ = body.flow_control().release_capacity(chunk.len());
            message.extend_from_slice(&chunk);
        }
        if let Some(trailers) = body.trailers().await.map_err(h2_error)? {
            check_status(&trailers)?;
        }
        let payload = message
            .get(5..)
            .ok_or_else(|| "answer without a message".to_owned())?;
        OverallCode::decode(payload)
            .map(|m| m.overall_code)
            .map_err(|e| format!("undecodable answer: {e}"))
    }
}

/// `Err("<code>: <message>")` when `headers` carry a grpc-status other than 0.
fn check_status(headers: &HeaderMap) -> Result<(), String> {
    let Some(status) = headers.get("grpc-status") else {
        return Ok(());
    };
    if status == "0" {
        return Ok(());
    }
    // grpc-message is percent-encoded on the wire.
    let message = headers
        .get("grpc-message")
        .map(|m| {
            percent_encoding::percent_decode(m.as_bytes())
                .decode_utf8_lossy()
                .into_owned()
        })
        .unwrap_or_default();
    Err(format!(
        "grpc-status {}: {message}",
        String::from_utf8_lossy(status.as_bytes())
    ))
}

fn h2_error(e: h2::Error) -> String {
    e.to_string()
}
