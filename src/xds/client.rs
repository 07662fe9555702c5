//! The xDS client's life: open the stream, subscribe, answer every response (compile off the
//! async workers, swap the rules in, ACK; or NACK), and open the stream again after a backoff
//! whenever it ends, keeping the rules in force meanwhile.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::XdsSource;
use super::backoff::Retries;
use super::protocol::{Judgment, Protocol};
use crate::log_text::LogText;
use crate::metrics::Metrics;
use crate::proto::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use crate::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::reload::Reloader;
use crate::rules::{ConfigError, ConfigErrors, Location};

/// Requests waiting to be written to the stream (one per response, so a few at most).
const OUTGOING: usize = 4;

/// What to send back for a response.
enum Reply {
    /// Nothing: the response was not for us.
    Ignore,
    /// At once.
    Now(DiscoveryRequest),
    /// After a pause, unless a newer response arrives first.
    After(Duration, DiscoveryRequest),
}

/// The running client.
pub(super) struct Client {
    source: XdsSource,
    reloader: Arc<Reloader>,
    metrics: Arc<Metrics>,
    protocol: Protocol,
    retries: Retries,
}

impl Client {
    pub(super) fn new(source: XdsSource, reloader: Arc<Reloader>, metrics: Arc<Metrics>) -> Self {
        let settings = &source.settings;
        Self {
            protocol: Protocol::new(&settings.node_id, &settings.node_metadata),
            retries: Retries::new(settings.backoff),
            source,
            reloader,
            metrics,
        }
    }

    /// Streams until `shutdown`, reconnecting after every end of the stream.
    pub(super) async fn run(mut self, shutdown: CancellationToken) {
        self.metrics.start_xds();
        let server = self.source.connect.uri().to_string();
        tracing::info!(%server, node = %self.source.settings.node_id, "xDS: connecting");
        loop {
            let mut delivered = false;
            let reason = tokio::select! {
                _ = shutdown.cancelled() => break,
                reason = self.stream(&mut delivered) => reason,
            };
            self.metrics.record_xds_connected(false);
            // A stream that delivered rules was healthy: start the backoff sequence again.
            if delivered {
                self.retries.reset();
            }
            let pause = self.retries.next(fastrand::f64());
            tracing::warn!(%server, reason = %LogText(&reason), retry_in = ?pause, "xDS stream ended; the rules in force stay");
            tokio::select! {
                _ = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
            self.metrics.record_xds_reconnect();
        }
        self.metrics.record_xds_connected(false);
    }

    /// One stream, from connecting to its end; returns why it ended. `delivered` is set once
    /// a response arrived.
    async fn stream(&mut self, delivered: &mut bool) -> String {
        let channel = match self.source.connect.connect().await {
            Ok(channel) => channel,
            Err(e) => return format!("cannot connect: {e}"),
        };
        let mut ads = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(self.source.settings.max_message_size);
        let (requests, outgoing) = mpsc::channel(OUTGOING);
        // The channel is empty: the first request always fits.
        let _ = requests.try_send(self.protocol.subscribe());
        let mut call = tonic::Request::new(ReceiverStream::new(outgoing));
        self.source.connect.add_headers(call.metadata_mut());
        let mut responses = match ads.stream_aggregated_resources(call).await {
            Ok(responses) => responses.into_inner(),
            Err(status) => return format!("stream refused: {status}"),
        };
        self.metrics.record_xds_connected(true);
        tracing::info!("xDS stream open");
        let mut pending: Option<(Instant, DiscoveryRequest)> = None;
        loop {
            let received = tokio::select! {
                received = responses.message() => received,
                () = until(pending.as_ref().map(|(at, _)| *at)) => {
                    if let Some((_, nack)) = pending.take() && !self.send(&requests, nack).await {
                        return "stream closed".into();
                    }
                    continue;
                }
            };
            let response = match received {
                Ok(Some(response)) => response,
                Ok(None) => return "closed by the control plane".into(),
                Err(status) => return status.to_string(),
            };
            *delivered = true;
            let reply = self.reply(&response).await;
            if !matches!(reply, Reply::Ignore) {
                // A newer response supersedes a NACK not sent yet (its nonce is stale now).
                pending = None;
            }
            match reply {
                Reply::Ignore => {}
                Reply::Now(request) => {
                    if !self.send(&requests, request).await {
                        return "stream closed".into();
                    }
                }
                Reply::After(pause, request) => pending = Some((Instant::now() + pause, request)),
            }
        }
    }

    /// Judges a response and puts accepted rules in force.
    async fn reply(&mut self, response: &DiscoveryResponse) -> Reply {
        let documents = match self.protocol.judge(response) {
            Judgment::Repeat { pause } => {
                tracing::debug!(version = %LogText(&response.version_info), ?pause, "xDS re-sent a rejected response");
                return Reply::After(pause, self.protocol.repeat_nack(response));
            }
            Judgment::Foreign => {
                tracing::warn!(
                    type_url = %LogText(&response.type_url),
                    version = %LogText(&response.version_info),
                    "xDS response of a type not subscribed to; ignored"
                );
                return Reply::Ignore;
            }
            Judgment::Unchanged => {
                tracing::debug!(version = %LogText(&response.version_info), "xDS re-sent the rules in force");
                self.metrics.record_xds_accepted(&response.version_info);
                return Reply::Now(self.protocol.accepted(response));
            }
            Judgment::Undecodable(errors) => return self.reject(response, &errors),
            Judgment::Compile(documents) => documents,
        };
        let options = self.source.load;
        let version = response.version_info.clone();
        let compiled =
            tokio::task::spawn_blocking(move || Protocol::compile(&documents, &options, &version))
                .await;
        match compiled {
            Ok(Ok(rules)) => {
                self.reloader.install(rules);
                self.metrics.record_xds_accepted(&response.version_info);
                Reply::Now(self.protocol.accepted(response))
            }
            Ok(Err(errors)) => self.reject(response, &errors),
            Err(e) => self.reject(response, &compiler_failed(&e)),
        }
    }

    fn reject(&mut self, response: &DiscoveryResponse, errors: &ConfigErrors) -> Reply {
        self.reloader.reject(errors, Some(&response.version_info));
        Reply::Now(self.protocol.rejected(response, errors))
    }

    /// Writes a request to the stream; `false` if the stream is gone.
    async fn send(
        &self,
        requests: &mpsc::Sender<DiscoveryRequest>,
        request: DiscoveryRequest,
    ) -> bool {
        if request.error_detail.is_some() {
            self.metrics.record_xds_nack();
        }
        requests.send(request).await.is_ok()
    }
}

/// Sleeps until `at`, or for ever without one.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The error NACKed if compiling panicked (a bug; the response is refused, not the process).
fn compiler_failed(error: &tokio::task::JoinError) -> ConfigErrors {
    ConfigErrors(vec![ConfigError {
        location: Location {
            file: "xds".into(),
            line: None,
            col: None,
        },
        message: format!("the rule compiler failed: {error}"),
    }])
}
