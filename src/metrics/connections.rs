//! The gRPC listener's connections: how many are open, and how many were refused at the cap
//! (`--grpc-max-connections`).

use prometheus::{IntCounter, IntGauge};

use super::names::{GRPC_CONNECTIONS, GRPC_CONNECTIONS_REFUSED};
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

impl Metrics {
    /// The gRPC connection figures.
    pub fn grpc_connections(&self) -> ConnectionFigures {
        self.connections.clone()
    }
}
