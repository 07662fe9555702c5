//! The state-of-the-world protocol, without I/O: the requests sluice sends (subscribe, ACK,
//! NACK) and what a response means.
//!
//! A response is the whole rule set. It is accepted (ACK with its version and nonce) or rejected
//! (NACK with the version in force, its nonce, and the errors). A control plane built on
//! go-control-plane's snapshot cache (Envoy Gateway's) answers a NACK by sending the same
//! snapshot again at once, for ever; such a re-send is recognised by its resources (the version
//! alone would not do: a restarted control plane counts versions from 1 again), not compiled
//! again, and answered after a pause that doubles up to [`MAX_REPEAT_PAUSE`], so the loop costs
//! nothing while a fixed snapshot still lands quickly. The rules in force sent again (the
//! same version and resources, as every reconnect brings) are ACKed without compiling them
//! again, and a response of another type than the subscribed one is ignored.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

use super::{TYPE_URL, convert};
use crate::proto::envoy::config::core::v3::Node;
use crate::proto::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use crate::proto::google::rpc::Status;
use crate::proto::well_known::Struct;
use crate::rules::{ConfigErrors, LoadOptions, RuleDocument, RuleSet, load_documents};

/// The first pause before answering a re-send of a rejected response.
const FIRST_REPEAT_PAUSE: Duration = Duration::from_secs(1);
/// The longest pause before answering a re-send of a rejected response: a fixed snapshot waits
/// at most this long behind a NACK loop.
pub(super) const MAX_REPEAT_PAUSE: Duration = Duration::from_secs(8);
/// The longest NACK message: a rule set with thousands of errors must not make a NACK that the
/// control plane refuses as too large.
const MAX_NACK_MESSAGE: usize = 16 * 1024;
/// `google.rpc.Code.INVALID_ARGUMENT`, the code of a NACK's `error_detail`.
const INVALID_ARGUMENT: i32 = 3;

/// What to do with a response.
#[derive(Debug)]
pub(super) enum Judgment {
    /// A response of another type than the one subscribed to: not ours to judge, so neither
    /// ACKed nor NACKed (as Envoy ignores a type it does not watch).
    Foreign,
    /// The rules in force again (same version, same resources: a resend after a reconnect):
    /// ACK at once, nothing to compile.
    Unchanged,
    /// Compile these documents; then [`Protocol::accepted`] or [`Protocol::rejected`].
    Compile(Vec<RuleDocument>),
    /// The resources do not decode: NACK at once with these errors.
    Undecodable(ConfigErrors),
    /// A re-send of the rejected response: NACK again after `pause`, nothing else.
    Repeat {
        /// How long to wait before the NACK.
        pause: Duration,
    },
}

/// The latest rejected response.
#[derive(Debug)]
struct Rejected {
    fingerprint: u64,
    message: String,
    repeats: u32,
}

/// The client's side of the protocol across streams: the version in force and the latest
/// rejection survive a reconnect.
#[derive(Debug)]
pub(super) struct Protocol {
    node: Node,
    accepted: Option<String>,
    /// The fingerprint of the accepted response's resources.
    accepted_fingerprint: Option<u64>,
    rejected: Option<Rejected>,
}

impl Protocol {
    /// A client identified by `node_id` and `metadata` (string fields).
    pub(super) fn new(node_id: &str, metadata: &[(String, String)]) -> Self {
        let fields: Struct = metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        Self {
            node: Node {
                id: node_id.to_string(),
                metadata: Some(fields),
                user_agent_name: "sluice".to_string(),
            },
            accepted: None,
            accepted_fingerprint: None,
            rejected: None,
        }
    }

    /// The first request of a stream: the version in force (empty before the first), no nonce
    /// (nonces belong to the stream that sent them).
    pub(super) fn subscribe(&self) -> DiscoveryRequest {
        self.request(String::new(), None)
    }

    /// Judges a response (see [`Judgment`]).
    pub(super) fn judge(&mut self, response: &DiscoveryResponse) -> Judgment {
        if response.type_url != TYPE_URL {
            return Judgment::Foreign;
        }
        let fingerprint = fingerprint(response);
        if self.accepted.as_deref() == Some(response.version_info.as_str())
            && self.accepted_fingerprint == Some(fingerprint)
        {
            return Judgment::Unchanged;
        }
        if let Some(rejected) = &mut self.rejected
            && rejected.fingerprint == fingerprint
        {
            rejected.repeats += 1;
            let doublings = (rejected.repeats - 1).min(8);
            let pause = (FIRST_REPEAT_PAUSE * (1 << doublings)).min(MAX_REPEAT_PAUSE);
            return Judgment::Repeat { pause };
        }
        match convert::documents(&response.resources) {
            Ok(documents) => Judgment::Compile(documents),
            Err(errors) => Judgment::Undecodable(errors),
        }
    }

    /// Compiles `documents` with `options`, for [`Judgment::Compile`] (kept here so that the
    /// caller can run it off the async workers).
    pub(super) fn compile(
        documents: &[RuleDocument],
        options: &LoadOptions,
        version: &str,
    ) -> Result<RuleSet, ConfigErrors> {
        let mut rules = load_documents(documents, options)?;
        rules.version = Some(version.to_string());
        Ok(rules)
    }

    /// The judged response is in force: its ACK.
    pub(super) fn accepted(&mut self, response: &DiscoveryResponse) -> DiscoveryRequest {
        self.rejected = None;
        self.accepted = Some(response.version_info.clone());
        self.accepted_fingerprint = Some(fingerprint(response));
        self.request(response.nonce.clone(), None)
    }

    /// The judged response was rejected with `errors`: its NACK.
    pub(super) fn rejected(
        &mut self,
        response: &DiscoveryResponse,
        errors: &ConfigErrors,
    ) -> DiscoveryRequest {
        let message = nack_message(errors);
        let nack = self.request(response.nonce.clone(), Some(message.clone()));
        self.rejected = Some(Rejected {
            fingerprint: fingerprint(response),
            message,
            repeats: 0,
        });
        nack
    }

    /// The NACK of a re-sent rejected response: the same errors, its nonce.
    pub(super) fn repeat_nack(&self, response: &DiscoveryResponse) -> DiscoveryRequest {
        let message = self.rejected.as_ref().map(|r| r.message.clone());
        self.request(response.nonce.clone(), message)
    }

    /// A request with the version in force (an ACK's is the new one, set just before).
    fn request(&self, nonce: String, error: Option<String>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: self.accepted.clone().unwrap_or_default(),
            node: Some(self.node.clone()),
            resource_names: Vec::new(),
            type_url: TYPE_URL.to_string(),
            response_nonce: nonce,
            error_detail: error.map(|message| Status {
                code: INVALID_ARGUMENT,
                message,
                details: Vec::new(),
            }),
        }
    }
}

/// Every error as `<resource name>: <error>`, one per line, cut to [`MAX_NACK_MESSAGE`].
fn nack_message(errors: &ConfigErrors) -> String {
    let mut message = String::new();
    for (written, error) in errors.iter().enumerate() {
        let line = error.to_string();
        if message.len() + line.len() + 1 > MAX_NACK_MESSAGE {
            message.push_str(&format!("\n... and {} more", errors.len() - written));
            break;
        }
        if written > 0 {
            message.push('\n');
        }
        message.push_str(&line);
    }
    message
}

/// A hash of the resources (types and bytes), to recognise a re-sent response.
fn fingerprint(response: &DiscoveryResponse) -> u64 {
    let mut hasher = DefaultHasher::new();
    for resource in &response.resources {
        resource.type_url.hash(&mut hasher);
        resource.value.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests;
