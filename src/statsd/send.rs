//! Getting lines to the receiver: UDP datagrams of at most [`MAX_DATAGRAM`] bytes, or one TCP
//! stream; the connection is made when needed and dropped on an error, to be made again at the
//! next flush. An outage is logged once, when it starts, and once when it ends.
//!
//! Over UDP a send that succeeds proves nothing: a datagram to a closed port is sent, and the
//! kernel reports the port unreachable (ICMP) on the socket's next send. So after a failure UDP
//! is reachable again only once two sends in a row went out, the second carrying no error of
//! the first; a closed port, which fails every other send, stays one outage with one line.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

use super::{StatsdProtocol, StatsdSettings};

/// gostats' UDP buffer: the most a datagram holds without fragmenting on a 1500-byte MTU
/// network (IP and UDP headers, and room for tunnels).
pub(super) const MAX_DATAGRAM: usize = 1432;
/// The longest a connection or a write may take: a receiver that hangs delays one flush, never
/// the next.
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The connection to the receiver, if one is open.
pub(super) struct Sender {
    addr: String,
    protocol: StatsdProtocol,
    conn: Option<StatsdConn>,
    failing: bool,
    /// UDP while failing: the last send went out, and no error of it has come back yet.
    unconfirmed: bool,
}

enum StatsdConn {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

impl Sender {
    pub(super) fn new(settings: &StatsdSettings) -> Self {
        Self {
            addr: settings.addr.clone(),
            protocol: settings.protocol,
            conn: None,
            failing: false,
            unconfirmed: false,
        }
    }

    /// Sends `lines` (each ending in `\n`); `false` if they did not all go out.
    pub(super) async fn send(&mut self, lines: &[String]) -> bool {
        let sent = tokio::time::timeout(IO_TIMEOUT, self.try_send(lines)).await;
        match sent {
            Ok(Ok(())) => {
                // A first UDP send after a failure may yet be refused (see the module's doc).
                let confirmed = self.protocol == StatsdProtocol::Tcp || self.unconfirmed;
                if self.failing && confirmed {
                    tracing::info!(addr = %self.addr, "statsd receiver reachable again");
                    self.failing = false;
                }
                self.unconfirmed = self.failing;
                true
            }
            outcome => {
                self.conn = None;
                self.unconfirmed = false;
                if !self.failing {
                    let error = match outcome {
                        Ok(Err(error)) => error.to_string(),
                        _ => "timed out".to_owned(),
                    };
                    tracing::warn!(addr = %self.addr, %error, "statsd receiver unreachable; stats are dropped until it is back");
                    self.failing = true;
                }
                false
            }
        }
    }

    async fn try_send(&mut self, lines: &[String]) -> std::io::Result<()> {
        if self.conn.is_none() {
            self.conn = Some(self.connect().await?);
        }
        match self.conn.as_mut() {
            Some(StatsdConn::Udp(socket)) => {
                for datagram in datagrams(lines, MAX_DATAGRAM) {
                    socket.send(&datagram).await?;
                }
            }
            Some(StatsdConn::Tcp(stream)) => {
                stream.write_all(lines.concat().as_bytes()).await?;
                stream.flush().await?;
            }
            None => {}
        }
        Ok(())
    }

    async fn connect(&self) -> std::io::Result<StatsdConn> {
        let addr = tokio::net::lookup_host(&self.addr)
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other("the name has no address"))?;
        Ok(match self.protocol {
            StatsdProtocol::Udp => {
                let local = if addr.is_ipv4() {
                    "0.0.0.0:0"
                } else {
                    "[::]:0"
                };
                let socket = UdpSocket::bind(local).await?;
                socket.connect(addr).await?;
                StatsdConn::Udp(socket)
            }
            StatsdProtocol::Tcp => StatsdConn::Tcp(TcpStream::connect(addr).await?),
        })
    }
}

/// `lines` packed into payloads of at most `max` bytes (a longer line goes alone).
pub(super) fn datagrams(lines: &[String], max: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut current = Vec::new();
    for line in lines {
        if !current.is_empty() && current.len() + line.len() > max {
            out.push(std::mem::take(&mut current));
        }
        current.extend_from_slice(line.as_bytes());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines are never split and no payload passes the bound unless one line alone does.
    #[test]
    fn lines_pack_into_bounded_datagrams() {
        let lines: Vec<String> = (0..300).map(|i| format!("stat.{i}:1|c\n")).collect();
        let packed = datagrams(&lines, MAX_DATAGRAM);
        assert!(packed.len() > 1 && packed.iter().all(|d| d.len() <= MAX_DATAGRAM));
        assert_eq!(packed.concat(), lines.concat().into_bytes());
        let long = vec!["x".repeat(2_000)];
        assert_eq!(datagrams(&long, MAX_DATAGRAM).len(), 1);
    }
}
