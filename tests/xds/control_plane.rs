//! A test xDS control plane that behaves as Envoy Gateway's: a tonic ADS server (written here,
//! with the messages of `wire.rs`, not sluice's client code) over a go-control-plane-style
//! state-of-the-world snapshot cache keyed by the exact node id.
//!
//! Per stream: nonces count from 1; a request whose nonce is not the last one sent is stale and
//! ignored; a snapshot is sent when the request's version differs from it or nothing was sent
//! on this stream yet, otherwise the request waits until the snapshot changes. A NACK carries
//! the old version, so the same snapshot goes straight back (go-control-plane's NACK loop).
//! Optionally mutual TLS as Envoy Gateway serves it: TLS 1.3 only, ALPN h2, client certificate
//! required. Every request is recorded for the tests to inspect.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use parking_lot::Mutex;
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use super::wire::{self, DiscoveryRequest, DiscoveryResponse};

/// The one method a Envoy Gateway control plane serves.
const ADS_PATH: &str =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";

/// A request as the control plane received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub node_id: String,
    pub node_metadata: HashMap<String, String>,
    pub user_agent: String,
    pub type_url: String,
    pub version: String,
    pub nonce: String,
    /// The NACK's message.
    pub error: Option<String>,
    /// The stream's request headers.
    pub headers: HashMap<String, String>,
}

#[derive(Debug, Clone)]
struct Snapshot {
    version: String,
    resources: Vec<wire::Any>,
    /// The response's `type_url` (the subscribed type unless a test says otherwise).
    type_url: String,
}

/// What every stream shares: the snapshots, the record of requests, a change signal.
struct State {
    snapshots: Mutex<HashMap<String, Snapshot>>,
    received: Mutex<Vec<Received>>,
    sent: AtomicU64,
    changed: watch::Sender<u64>,
    /// Bumped to end every open stream (a flapping control plane).
    flaps: watch::Sender<u64>,
}

/// A running control plane; stops when dropped.
pub struct ControlPlane {
    pub addr: SocketAddr,
    state: Arc<State>,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl ControlPlane {
    /// Starts on a free loopback port, plaintext or with `tls`.
    pub async fn start(tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        Self::start_at("127.0.0.1:0".parse().unwrap(), tls).await
    }

    async fn start_at(addr: SocketAddr, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let state = Arc::new(State {
            snapshots: Mutex::default(),
            received: Mutex::default(),
            sent: AtomicU64::new(0),
            changed: watch::channel(0).0,
            flaps: watch::channel(0).0,
        });
        let listener = TcpListener::bind(addr).await.expect("bind control plane");
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, tls.clone(), state.clone(), stop.clone()));
        Self {
            addr,
            state,
            tls,
            stop,
            server: Some(server),
        }
    }

    /// Stops (ending every stream with UNAVAILABLE, as a control plane going away does) and
    /// starts again on the same port with a fresh cache: no snapshots, nothing recorded.
    pub async fn restart(mut self) -> Self {
        let addr = self.addr;
        self.shutdown().await;
        Self::start_at(addr, self.tls.clone()).await
    }

    /// Ends every open stream with UNAVAILABLE and goes on serving with the same snapshots, as
    /// a flapping control plane or a proxy in front of it does: clients reconnect and are sent
    /// the snapshot they already hold.
    pub fn flap(&self) {
        self.state.flaps.send_modify(|n| *n += 1);
    }

    /// Stops serving; streams end, the port closes.
    pub async fn shutdown(&mut self) {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }

    /// Sets the snapshot of `node_id` to `configs` at `version`; waiting streams get it.
    pub fn set_snapshot(&self, node_id: &str, version: &str, configs: &[wire::RateLimitConfig]) {
        self.set_snapshot_typed(node_id, version, wire::TYPE_URL, configs);
    }

    /// As [`Self::set_snapshot`], the responses naming `type_url` as their type (a control
    /// plane that mixes up its types) while the resources stay rate-limit configs.
    pub fn set_snapshot_typed(
        &self,
        node_id: &str,
        version: &str,
        type_url: &str,
        configs: &[wire::RateLimitConfig],
    ) {
        let resources = configs
            .iter()
            .map(|c| wire::Any {
                type_url: wire::TYPE_URL.into(),
                value: c.encode_to_vec(),
            })
            .collect();
        let snapshot = Snapshot {
            version: version.into(),
            resources,
            type_url: type_url.into(),
        };
        self.state.snapshots.lock().insert(node_id.into(), snapshot);
        self.state.changed.send_modify(|n| *n += 1);
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().clone()
    }

    /// The NACKs received so far.
    pub fn nacks(&self) -> Vec<Received> {
        self.received()
            .into_iter()
            .filter(|r| r.error.is_some())
            .collect()
    }

    /// How many responses were sent.
    pub fn responses_sent(&self) -> u64 {
        self.state.sent.load(Ordering::SeqCst)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    state: Arc<State>,
    stop: CancellationToken,
) {
    let ads = Ads {
        state,
        stop: stop.clone(),
    };
    let router = tonic::transport::Server::builder().add_service(ads);
    let stopped = stop.clone().cancelled_owned();
    let result = match tls {
        None => {
            let incoming = futures_util::stream::unfold(listener, |listener| async move {
                let accepted = listener.accept().await.map(|(stream, _)| stream);
                Some((accepted, listener))
            });
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
        Some(config) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(config);
            let incoming = futures_util::stream::unfold(
                (listener, acceptor),
                |(listener, acceptor)| async move {
                    // A failed handshake (e.g. no client certificate) drops that connection only.
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else {
                            continue;
                        };
                        if let Ok(stream) = acceptor.accept(tcp).await {
                            return Some((Ok::<_, std::io::Error>(stream), (listener, acceptor)));
                        }
                    }
                },
            );
            router.serve_with_incoming_shutdown(incoming, stopped).await
        }
    };
    result.expect("control plane serves");
}

/// The ADS service (what tonic's generated server would be, by hand).
#[derive(Clone)]
struct Ads {
    state: Arc<State>,
    stop: CancellationToken,
}

impl NamedService for Ads {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
}

impl Service<http::Request<Body>> for Ads {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let method = StreamMethod(self.clone());
        Box::pin(async move {
            if request.uri().path() != ADS_PATH {
                return Ok(Status::unimplemented("only ADS is served").into_http());
            }
            let codec = tonic_prost::ProstCodec::<DiscoveryResponse, DiscoveryRequest>::default();
            Ok(Grpc::new(codec).streaming(method, request).await)
        })
    }
}

struct StreamMethod(Ads);

impl StreamingService<DiscoveryRequest> for StreamMethod {
    type Response = DiscoveryResponse;
    type ResponseStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<Streaming<DiscoveryRequest>>) -> Self::Future {
        let ads = self.0.clone();
        Box::pin(async move {
            let headers = request
                .metadata()
                .clone()
                .into_headers()
                .iter()
                .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_string())))
                .collect();
            let (responses, stream) = mpsc::channel(16);
            tokio::spawn(one_stream(ads, request.into_inner(), responses, headers));
            Ok(Response::new(ReceiverStream::new(stream)))
        })
    }
}

/// One stream's snapshot-cache logic (see the module documentation).
async fn one_stream(
    ads: Ads,
    mut requests: Streaming<DiscoveryRequest>,
    responses: mpsc::Sender<Result<DiscoveryResponse, Status>>,
    headers: HashMap<String, String>,
) {
    let state = ads.state.clone();
    let mut changes = state.changed.subscribe();
    let mut flaps = state.flaps.subscribe();
    let mut stream = StreamState::default();
    loop {
        tokio::select! {
            _ = flaps.changed() => {
                let _ = responses.send(Err(Status::unavailable("control plane flapped"))).await;
                return;
            }
            _ = ads.stop.cancelled() => {
                let _ = responses.send(Err(Status::unavailable("control plane stopping"))).await;
                return;
            }
            request = requests.message() => {
                let Ok(Some(request)) = request else { return };
                state.received.lock().push(record(&request, &headers));
                if let Some(response) = stream.on_request(&state, request) {
                    state.sent.fetch_add(1, Ordering::SeqCst);
                    if responses.send(Ok(response)).await.is_err() {
                        return;
                    }
                }
            }
            changed = changes.changed(), if stream.watch.is_some() => {
                if changed.is_err() {
                    return;
                }
                if let Some(response) = stream.on_change(&state) {
                    state.sent.fetch_add(1, Ordering::SeqCst);
                    if responses.send(Ok(response)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// A stream's nonce counter, what it sent, and its open watch (node id, version held).
#[derive(Default)]
struct StreamState {
    nonce: u64,
    last_nonce: Option<String>,
    watch: Option<(String, String)>,
}

impl StreamState {
    fn on_request(
        &mut self,
        state: &State,
        request: DiscoveryRequest,
    ) -> Option<DiscoveryResponse> {
        // A nonce that is not the latest sent on this stream is stale: ignored.
        if !request.response_nonce.is_empty()
            && Some(&request.response_nonce) != self.last_nonce.as_ref()
        {
            return None;
        }
        let node = request.node.map(|n| n.id).unwrap_or_default();
        let snapshot = state.snapshots.lock().get(&node).cloned();
        match snapshot {
            Some(s) if s.version != request.version_info || self.last_nonce.is_none() => {
                self.watch = None;
                Some(self.respond(s))
            }
            _ => {
                self.watch = Some((node, request.version_info));
                None
            }
        }
    }

    fn on_change(&mut self, state: &State) -> Option<DiscoveryResponse> {
        let (node, version) = self.watch.as_ref()?;
        let snapshot = state.snapshots.lock().get(node).cloned()?;
        if snapshot.version == *version {
            return None;
        }
        self.watch = None;
        Some(self.respond(snapshot))
    }

    fn respond(&mut self, snapshot: Snapshot) -> DiscoveryResponse {
        self.nonce += 1;
        let nonce = self.nonce.to_string();
        self.last_nonce = Some(nonce.clone());
        DiscoveryResponse {
            version_info: snapshot.version,
            resources: snapshot.resources,
            canary: false,
            type_url: snapshot.type_url,
            nonce,
        }
    }
}

fn record(request: &DiscoveryRequest, headers: &HashMap<String, String>) -> Received {
    let node = request.node.clone().unwrap_or_default();
    let node_metadata = node
        .metadata
        .map(|m| {
            m.fields
                .into_iter()
                .filter_map(|(k, v)| Some((k, v.string_value?)))
                .collect()
        })
        .unwrap_or_default();
    Received {
        node_id: node.id,
        node_metadata,
        user_agent: node.user_agent_name,
        type_url: request.type_url.clone(),
        version: request.version_info.clone(),
        nonce: request.response_nonce.clone(),
        error: request.error_detail.as_ref().map(|s| s.message.clone()),
        headers: headers.clone(),
    }
}
