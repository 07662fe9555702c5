//! The listeners' connections: how many are open, and how many were refused (gRPC,
//! `--grpc-max-connections`) or evicted (HTTP, `--http-max-connections`) at the cap.

use prometheus::{IntCounter, IntGauge};

use super::names::{
    GRPC_CONNECTIONS, GRPC_CONNECTIONS_REFUSED, HTTP_CONNECTIONS, HTTP_CONNECTIONS_EVICTED,
};
use super::{Families, Metrics};

/// The connection families, cloned into the accept loop (handles, not lookups).
#[derive(Debug, Clone)]
pub struct ConnectionFigures {
    open: IntGauge,
    refused: IntCounter,
}

impl ConnectionFigures {
    /// Registers the families.
    pub(super) fn new(families: &Families<'_>) -> Self {
        Self {
            open: families.gauge(GRPC_CONNECTIONS, "gRPC connections open."),
            refused: families.counter(
                GRPC_CONNECTIONS_REFUSED,
                "gRPC connections closed at once because --grpc-max-connections were open.",
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

    /// A connection was closed at once: the cap was reached.
    pub fn refused(&self) {
        self.refused.inc();
    }
}

/// The HTTP listener's connection families, cloned into its accept loop.
#[derive(Debug, Clone)]
pub struct HttpConnectionFigures {
    open: IntGauge,
    evicted: IntCounter,
}

impl HttpConnectionFigures {
    /// Registers the families.
    pub(super) fn new(families: &Families<'_>) -> Self {
        Self {
            open: families.gauge(HTTP_CONNECTIONS, "HTTP connections open on --http-addr."),
            evicted: families.counter(
                HTTP_CONNECTIONS_EVICTED,
                "HTTP connections asked to close, oldest first, to keep the open ones within \
                 --http-max-connections.",
            ),
        }
    }

    /// A connection was accepted.
    pub fn opened(&self) {
        self.open.inc();
    }

    /// A connection ended.
    pub fn closed(&self) {
        self.open.dec();
    }

    /// A connection was asked to close to make room.
    pub fn evicted(&self) {
        self.evicted.inc();
    }
}

impl Metrics {
    /// The gRPC connection figures.
    pub fn grpc_connections(&self) -> ConnectionFigures {
        self.connections.clone()
    }

    /// The HTTP listener's connection figures.
    pub fn http_connections(&self) -> HttpConnectionFigures {
        self.http_connections.clone()
    }
}
