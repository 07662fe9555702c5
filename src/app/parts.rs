//! The parts of a server, built and checked before anything serves (`build.rs`), then handed
//! to the launch.

use std::sync::Arc;

use crate::admin::Tokens;
use crate::clock::Clock;
use crate::limiter::Limiter;
use crate::metrics::Metrics;
use crate::store::{PortionStore, Store};
use crate::tls::ServerTls;
use crate::xds::XdsSource;

use super::region::RegionParts;
use super::{Reloader, Settings};

/// The parts of a server, built and checked before anything is served.
pub(super) struct Parts {
    pub(super) settings: Settings,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) reloader: Arc<Reloader>,
    pub(super) xds: Option<XdsSource>,
    pub(super) tls: Option<ServerTls>,
    pub(super) store: Arc<dyn Store>,
    pub(super) limiter: Arc<Limiter>,
    /// On a store replicas share: where they claim their portions of RLQS limits.
    pub(super) portion_store: Option<Arc<dyn PortionStore>>,
    /// The admin listener's tokens, when it is on.
    pub(super) admin: Option<Tokens>,
    /// One of several regions: this replica's side and the global store.
    pub(super) region: Option<RegionParts>,
}
