//! Dead-peer detection on accepted gRPC connections, done by the kernel (TCP keepalive and
//! `TCP_USER_TIMEOUT`) rather than by HTTP/2 PINGs, which cost every call a timer check.

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// A connection idle this long gets a keepalive probe...
pub const IDLE: Duration = Duration::from_secs(30);
/// ...repeated this often...
pub const INTERVAL: Duration = Duration::from_secs(10);
/// ...and closed after this many go unanswered (about a minute after the peer vanished).
pub const PROBES: u32 = 3;
/// Data sent and not acknowledged for this long closes the connection too: probes only run
/// on an idle connection, and the kernel's own retransmission gives up after ~15 minutes.
pub const UNACKNOWLEDGED: Duration = Duration::from_secs(60);

/// Turns dead-peer detection on for `tcp`: a peer that vanished without a FIN (host gone,
/// cable cut, NAT state dropped) loses its connection, and sluice its file descriptor, within
/// about a minute. A connection the settings cannot be applied to is served anyway.
pub fn detect_dead_peer(tcp: &TcpStream) {
    let socket = SockRef::from(tcp);
    let keepalive = TcpKeepalive::new()
        .with_time(IDLE)
        .with_interval(INTERVAL)
        .with_retries(PROBES);
    if let Err(error) = socket.set_tcp_keepalive(&keepalive) {
        tracing::debug!(%error, "cannot set TCP keepalive");
    }
    if let Err(error) = socket.set_tcp_user_timeout(Some(UNACKNOWLEDGED)) {
        tracing::debug!(%error, "cannot set TCP_USER_TIMEOUT");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings read back from an accepted connection are the ones above.
    #[tokio::test]
    async fn an_accepted_connection_carries_the_settings() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        detect_dead_peer(&accepted);
        let socket = SockRef::from(&accepted);
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), IDLE);
        assert_eq!(socket.tcp_keepalive_interval().unwrap(), INTERVAL);
        assert_eq!(socket.tcp_keepalive_retries().unwrap(), PROBES);
        assert_eq!(socket.tcp_user_timeout().unwrap(), Some(UNACKNOWLEDGED));
    }
}
