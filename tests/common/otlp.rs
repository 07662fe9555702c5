//! A small trace receiver: a tonic server of the OpenTelemetry collector's trace service
//! (OTLP/gRPC), an axum server taking `POST /v1/traces` (OTLP/HTTP, protobuf), or one taking
//! Zipkin's `POST /api/v2/spans` (JSON v2, what Envoy's Zipkin tracer sends: a stand-in for a
//! Zipkin collector), on a free loopback port, keeping every span it is sent. It runs on its own thread and
//! runtime, so sync tests (Envoy) and async ones can both use it; it stops when dropped.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;

use super::process::poll;

/// One span as received, ids in lower-case hex.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The resource's `service.name`.
    pub service: String,
    /// The span name.
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, empty for a root span.
    pub parent_span_id: String,
    /// Attributes, each value written out (`[a, b]` for arrays).
    pub attributes: BTreeMap<String, String>,
}

impl ReceivedSpan {
    /// The attribute `name`, which must be present.
    pub fn attribute(&self, name: &str) -> &str {
        self.attributes
            .get(name)
            .unwrap_or_else(|| panic!("no attribute {name} in {self:?}"))
    }
}

#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// OTLP/HTTP: a protobuf `ExportTraceServiceRequest` in, an empty response out.
async fn http_export(
    axum::extract::State(collector): axum::extract::State<Collector>,
    body: axum::body::Bytes,
) -> (
    axum::http::StatusCode,
    [(&'static str, &'static str); 1],
    Vec<u8>,
) {
    use prost::Message as _;
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            collector.keep(request);
            let reply = ExportTraceServiceResponse::default().encode_to_vec();
            let protobuf = [("content-type", "application/x-protobuf")];
            (axum::http::StatusCode::OK, protobuf, reply)
        }
        Err(_) => (
            axum::http::StatusCode::BAD_REQUEST,
            [("content-type", "text/plain")],
            b"not an ExportTraceServiceRequest".to_vec(),
        ),
    }
}

/// Zipkin v2: a JSON array of spans in, 202 out.
async fn zipkin_export(
    axum::extract::State(collector): axum::extract::State<Collector>,
    body: axum::body::Bytes,
) -> axum::http::StatusCode {
    let Ok(spans) = serde_json::from_slice::<Vec<serde_json::Value>>(&body) else {
        return axum::http::StatusCode::BAD_REQUEST;
    };
    let field = |span: &serde_json::Value, name: &str| {
        span.get(name)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let mut kept = collector.spans.lock().unwrap();
    for span in spans {
        let service = span
            .pointer("/localEndpoint/serviceName")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        let attributes = span
            .get("tags")
            .and_then(|t| t.as_object())
            .map(|tags| {
                tags.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        kept.push(ReceivedSpan {
            service,
            name: field(&span, "name"),
            trace_id: field(&span, "traceId"),
            span_id: field(&span, "id"),
            parent_span_id: field(&span, "parentId"),
            attributes,
        });
    }
    axum::http::StatusCode::ACCEPTED
}

impl Collector {
    fn keep(&self, request: ExportTraceServiceRequest) {
        let mut kept = self.spans.lock().unwrap();
        for resource_spans in request.resource_spans {
            let service = resource_spans
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .map(|a| text(a.value.as_ref()))
                .unwrap_or_default();
            for span in resource_spans.scope_spans.into_iter().flat_map(|s| s.spans) {
                kept.push(ReceivedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|a| (a.key.clone(), text(a.value.as_ref())))
                        .collect(),
                });
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::ArrayValue(a)) => {
            let items: Vec<String> = a.values.iter().map(|v| text(Some(v))).collect();
            format!("[{}]", items.join(", "))
        }
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// The running receiver.
pub struct Receiver {
    /// Where it listens (`http://<addr>` is the OTLP/gRPC endpoint).
    pub addr: SocketAddr,
    collector: Collector,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The wire a receiver speaks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wire {
    Grpc,
    Http,
    Zipkin,
}

impl Receiver {
    /// Starts an OTLP/gRPC receiver on a free loopback port.
    pub fn start() -> Self {
        Self::start_on(Wire::Grpc)
    }

    /// Starts an OTLP/HTTP receiver (`POST /v1/traces`) on a free loopback port.
    pub fn start_http() -> Self {
        Self::start_on(Wire::Http)
    }

    /// Starts a Zipkin v2 JSON receiver (`POST /api/v2/spans`) on a free loopback port.
    pub fn start_zipkin() -> Self {
        Self::start_on(Wire::Zipkin)
    }

    fn start_on(wire: Wire) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        listener.set_nonblocking(true).expect("non-blocking");
        let addr = listener.local_addr().expect("receiver address");
        let collector = Collector::default();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = collector.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("receiver runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let stopped = async {
                    let _ = stopped.await;
                };
                if wire == Wire::Zipkin {
                    let app = axum::Router::new()
                        .route("/api/v2/spans", axum::routing::post(zipkin_export))
                        .with_state(served);
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await;
                    return;
                }
                if wire == Wire::Http {
                    let app = axum::Router::new()
                        .route("/v1/traces", axum::routing::post(http_export))
                        .with_state(served);
                    let _ = axum::serve(listener, app)
                        .with_graceful_shutdown(stopped)
                        .await;
                    return;
                }
                let incoming = tonic::transport::server::TcpIncoming::from(listener);
                let _ = tonic::transport::Server::builder()
                    .add_service(TraceServiceServer::new(served))
                    .serve_with_incoming_shutdown(incoming, stopped)
                    .await;
            });
        });
        Self {
            addr,
            collector,
            stop: Some(stop),
        }
    }

    /// The endpoint URL (`http://<addr>`; over HTTP sluice adds `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.collector.spans.lock().unwrap().clone()
    }

    /// Waits (generously: exports are batched every few seconds) for a span `matches` accepts.
    pub fn wait_for(&self, what: &str, matches: impl Fn(&ReceivedSpan) -> bool) -> ReceivedSpan {
        poll(Duration::from_secs(60), what, || {
            self.spans().into_iter().find(|s| matches(s))
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
