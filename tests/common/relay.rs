//! A TCP relay that stands for a long link: every byte is held for a delay each way (this
//! kernel has no `sch_netem`), and the link can be cut and healed on demand: while cut it
//! holds every byte, both ways, and passes them on in order once healed (the connections stay
//! open, as TCP's retransmissions would carry them across a partition that heals).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A relay to one upstream.
pub struct Relay {
    /// Where clients connect.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
}

impl Relay {
    /// A relay to `upstream` holding each byte `toward` it and `back` from it.
    pub async fn start(upstream: SocketAddr, toward: Duration, back: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let switch = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(carry(client_read, server_write, toward, switch.clone()));
                tokio::spawn(carry(server_read, client_write, back, switch.clone()));
            }
        });
        Self { addr, cut }
    }

    /// Cuts the link (`true`) or heals it (`false`).
    pub fn set_cut(&self, cut: bool) {
        self.cut.store(cut, Ordering::SeqCst);
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read and not while `cut`, in
/// order.
async fn carry(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: Duration,
    cut: Arc<AtomicBool>,
) {
    let (chunks, mut queued) =
        tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((at, bytes)) = queued.recv().await {
            tokio::time::sleep_until(at).await;
            while cut.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(n @ 1..) = from.read(&mut buf).await {
        let _ = chunks.send((tokio::time::Instant::now() + delay, buf[..n].to_vec()));
    }
    drop(chunks);
    let _ = writer.await;
}
