//! The listeners' connections: how many are open, and how many were refused (gRPC,
//! `--grpc-max-connections`) or evicted (HTTP, `--http-max-connections`) at the cap.

use prometheus::{IntCounter, IntGauge};

use super::names::{
    GRPC_CONNECTIONS, GRPC_CONNECTIONS_REFUSED, HTTP_CONNECTIONS, HTTP_CONNECTIONS_EVICTED,
};
use super::{Families, Metrics};

/// One listener's connection families, cloned into its accept loop (handles, not lookups).
#[derive(Debug, Clone)]
pub struct ConnectionFigures {
    open: IntGauge,
    capped: IntCounter,
}

impl ConnectionFigures {
    /// Registers the gRPC listener's families.
    pub(super) fn grpc(families: &Families<'_>) -> Self {
        Self {
            open: families.gauge(GRPC_CONNECTIONS, "gRPC connections open."),
            capped: families.counter(
                GRPC_CONNECTIONS_REFUSED,
                "gRPC connections closed at once because --grpc-max-connections were open.",
            ),
        }
    }

    /// Registers the HTTP listener's families.
    pub(super) fn http(families: &Families<'_>) -> Self {
        Self {
            open: families.gauge(HTTP_CONNECTIONS, "HTTP connections open on --http-addr."),
            capped: families.counter(
                HTTP_CONNECTIONS_EVICTED,
                "HTTP connections asked to close, oldest first, to keep the open ones within \
                 --http-max-connections.",
            ),
        }
    }

    /// A connection was accepted and is served.
    pub fn opened(&self) {
        self.open.inc();
    }

    /// A served connection ended.
    pub fn closed(&self) {
        self.open.dec();
    }

    /// A connection was closed because of the cap: refused on accept (gRPC), or asked to
    /// close to make room (HTTP).
    pub fn capped(&self) {
        self.capped.inc();
    }
}

impl Metrics {
    /// The gRPC connection figures.
    pub fn grpc_connections(&self) -> ConnectionFigures {
        self.connections.clone()
    }

    /// The HTTP listener's connection figures.
    pub fn http_connections(&self) -> ConnectionFigures {
        self.http_connections.clone()
    }
}
