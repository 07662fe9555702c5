//! The xDS rule source's figures: whether the stream is open, the version in force, ACKs,
//! NACKs and reconnects. The series exist only once an xDS source starts ([`Metrics::start_xds`]),
//! so a server reading rule files shows no "disconnected" stream to alert on.

use prometheus::{IntCounterVec, IntGaugeVec};

use super::names::{XDS_ACCEPTED_VERSION, XDS_ACKS, XDS_CONNECTED, XDS_NACKS, XDS_RECONNECTS};
use super::{Families, Metrics};

/// The xDS families (label-less vectors: no series until the source starts).
pub(super) struct XdsFigures {
    connected: IntGaugeVec,
    accepted_version: IntGaugeVec,
    acks: IntCounterVec,
    nacks: IntCounterVec,
    reconnects: IntCounterVec,
}

impl XdsFigures {
    /// Registers the families.
    pub(super) fn new(families: &Families<'_>) -> Self {
        Self {
            connected: families.gauge_vec(XDS_CONNECTED, "1 while the xDS stream is open.", &[]),
            accepted_version: families.gauge_vec(
                XDS_ACCEPTED_VERSION,
                "The version of the rules last accepted over xDS (value 1).",
                &["version"],
            ),
            acks: families.counter_vec(XDS_ACKS, "xDS responses accepted.", &[]),
            nacks: families.counter_vec(XDS_NACKS, "xDS responses rejected.", &[]),
            reconnects: families.counter_vec(XDS_RECONNECTS, "xDS streams re-opened.", &[]),
        }
    }
}

impl Metrics {
    /// Makes the xDS series appear, at 0 (the stream is not open yet).
    pub fn start_xds(&self) {
        let xds = &self.xds;
        xds.connected.with_label_values::<&str>(&[]).set(0);
        for counter in [&xds.acks, &xds.nacks, &xds.reconnects] {
            counter.with_label_values::<&str>(&[]).inc_by(0);
        }
    }

    /// Records whether the xDS stream is open.
    pub fn record_xds_connected(&self, connected: bool) {
        let value = i64::from(connected);
        self.xds.connected.with_label_values::<&str>(&[]).set(value);
    }

    /// Records an accepted xDS response of `version`: its ACK, and the version now in force.
    pub fn record_xds_accepted(&self, version: &str) {
        let xds = &self.xds;
        xds.acks.with_label_values::<&str>(&[]).inc();
        // One series only: the version in force, not every version ever seen.
        xds.accepted_version.reset();
        xds.accepted_version.with_label_values(&[version]).set(1);
    }

    /// Records a NACK sent.
    pub fn record_xds_nack(&self) {
        self.xds.nacks.with_label_values::<&str>(&[]).inc();
    }

    /// Records a stream re-opened.
    pub fn record_xds_reconnect(&self) {
        self.xds.reconnects.with_label_values::<&str>(&[]).inc();
    }
}
