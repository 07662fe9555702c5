//! The span exporter for the chosen OTLP protocol: tonic for gRPC, hyper for HTTP.

use std::future::Future;
use std::pin::Pin;

use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig as _, WithHttpConfig as _};

use super::settings::{OtlpProtocol, TraceSettings};

/// Where OTLP/HTTP collectors take traces when the URL names no path.
const TRACES_PATH: &str = "/v1/traces";

/// The exporter of `settings`, or why it cannot be built. Must run inside a Tokio runtime.
pub(super) fn span_exporter(settings: &TraceSettings) -> Result<SpanExporter, String> {
    let builder = SpanExporter::builder();
    let built = match settings.protocol {
        OtlpProtocol::Grpc => builder
            .with_tonic()
            .with_endpoint(settings.endpoint.clone())
            .with_timeout(settings.export_timeout)
            .build(),
        OtlpProtocol::Http => {
            let client = OnRuntime {
                client: HyperClient::with_default_connector(settings.export_timeout, None),
                runtime: tokio::runtime::Handle::try_current().map_err(|e| e.to_string())?,
            };
            builder
                .with_http()
                .with_http_client(client)
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(traces_url(&settings.endpoint)?)
                .with_timeout(settings.export_timeout)
                .build()
        }
    };
    built.map_err(|e| e.to_string())
}

/// The OTLP/HTTP traces URL of `endpoint`: `/v1/traces` added when it names no path. Only
/// `http://`: the exporter's hyper client speaks no TLS (a collector beside the pod, or a
/// sidecar, takes plain HTTP).
fn traces_url(endpoint: &str) -> Result<String, String> {
    let mut url = url::Url::parse(endpoint).map_err(|e| format!("not a URL: {e}"))?;
    if url.scheme() != "http" {
        return Err(format!(
            "OTLP/HTTP goes to http:// URLs only (not {}://)",
            url.scheme()
        ));
    }
    if matches!(url.path(), "" | "/") {
        url.set_path(TRACES_PATH);
    }
    Ok(url.into())
}

/// hyper's client run on sluice's Tokio runtime. The SDK's batch exporter sends from a thread
/// of its own without a runtime, while hyper needs Tokio's reactor and timer: each request is
/// spawned onto the runtime and awaited from there.
#[derive(Debug, Clone)]
struct OnRuntime {
    client: HyperClient,
    runtime: tokio::runtime::Handle,
}

impl HttpClient for OnRuntime {
    fn send_bytes<'this, 'call>(
        &'this self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'call>>
    where
        'this: 'call,
        Self: 'call,
    {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await });
        Box::pin(async move { sent.await.map_err(|e| Box::new(e) as HttpError)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_url_adds_the_path_only_when_none_is_given() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("http://collector:4318/custom/traces").unwrap(),
            "http://collector:4318/custom/traces"
        );
        assert!(
            traces_url("https://collector:4318")
                .unwrap_err()
                .contains("http:// URLs only")
        );
        assert!(traces_url("collector:4318 x").is_err());
    }
}
