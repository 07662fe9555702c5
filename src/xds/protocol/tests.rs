use prost::Message;

use super::*;
use crate::proto::ratelimit::config::ratelimit::v3 as rls_conf;
use crate::proto::well_known::Any;
use crate::rules::{ConfigError, Location};

/// A response of version `version` (nonce `n<version>`) with one config of domain `domain`
/// limiting key `k` to `requests` per second (0 = an invalid unit).
fn response(version: &str, domain: &str, requests: u32) -> DiscoveryResponse {
    let unit = if requests == 0 {
        rls_conf::RateLimitUnit::Unknown
    } else {
        rls_conf::RateLimitUnit::Second
    };
    let config = rls_conf::RateLimitConfig {
        name: domain.into(),
        domain: domain.into(),
        descriptors: vec![rls_conf::RateLimitDescriptor {
            key: "k".into(),
            rate_limit: Some(rls_conf::RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: requests.max(1),
                ..Default::default()
            }),
            ..Default::default()
        }],
    };
    DiscoveryResponse {
        version_info: version.into(),
        resources: vec![Any {
            type_url: TYPE_URL.into(),
            value: config.encode_to_vec().into(),
        }],
        nonce: format!("n{version}"),
        type_url: TYPE_URL.into(),
        ..Default::default()
    }
}

/// Judges `response` as the client does: compile, then accept or reject.
fn answer(protocol: &mut Protocol, response: &DiscoveryResponse) -> DiscoveryRequest {
    match protocol.judge(response) {
        Judgment::Compile(docs) => {
            match Protocol::compile(&docs, &LoadOptions::default(), &response.version_info) {
                Ok(rules) => {
                    assert_eq!(
                        rules.version.as_deref(),
                        Some(response.version_info.as_str())
                    );
                    protocol.accepted(response)
                }
                Err(errors) => protocol.rejected(response, &errors),
            }
        }
        Judgment::Undecodable(errors) => protocol.rejected(response, &errors),
        Judgment::Repeat { .. } => protocol.repeat_nack(response),
        Judgment::Unchanged => protocol.accepted(response),
        Judgment::Foreign => panic!("a foreign response has no answer"),
    }
}

/// The first request names the node (id, metadata, user agent) and the type, with no version
/// and no nonce; after an accepted response a new stream starts from that version.
#[test]
fn subscribe_then_ack() {
    let mut protocol = Protocol::new("envoy-ratelimit", &[("zone".into(), "a".into())]);
    let first = protocol.subscribe();
    assert_eq!(first.type_url, TYPE_URL);
    assert_eq!(
        (first.version_info.as_str(), first.response_nonce.as_str()),
        ("", "")
    );
    assert!(first.resource_names.is_empty() && first.error_detail.is_none());
    let node = first.node.expect("node");
    assert_eq!(
        (node.id.as_str(), node.user_agent_name.as_str()),
        ("envoy-ratelimit", "sluice")
    );
    let zone = &node.metadata.expect("metadata").fields["zone"];
    assert_eq!(
        zone,
        &crate::proto::well_known::Value::from("a".to_string())
    );

    let ack = answer(&mut protocol, &response("1", "d", 5));
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("1", "n1")
    );
    assert!(ack.error_detail.is_none());
    assert_eq!(protocol.subscribe().version_info, "1");
    assert_eq!(protocol.subscribe().response_nonce, "");
}

/// A response that does not compile is NACKed with the version in force, its nonce and the
/// errors as `<resource name>: <error>`.
#[test]
fn nack_keeps_the_version_in_force() {
    let mut protocol = Protocol::new("n", &[]);
    answer(&mut protocol, &response("1", "good", 5));
    let nack = answer(&mut protocol, &response("2", "bad", 0));
    assert_eq!(
        (nack.version_info.as_str(), nack.response_nonce.as_str()),
        ("1", "n2")
    );
    let status = nack.error_detail.expect("error detail");
    assert_eq!(status.message, "bad: invalid rate limit unit 'UNKNOWN'");
    assert_eq!(status.code, INVALID_ARGUMENT);
    assert_eq!(protocol.subscribe().version_info, "1", "still in force");
}

/// A re-sent rejected response is not compiled again: it is a repeat, NACKed after pauses
/// that double up to the cap, each with its own nonce and the same errors; new content is
/// judged again, and an accepted response ends the repeats.
#[test]
fn resends_of_a_rejected_response_are_paced() {
    let mut protocol = Protocol::new("n", &[]);
    let bad = response("7", "bad", 0);
    let first = answer(&mut protocol, &bad);
    let pauses: Vec<Duration> = (0..6)
        .map(|_| match protocol.judge(&bad) {
            Judgment::Repeat { pause } => pause,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(pauses, [1, 2, 4, 8, 8, 8].map(Duration::from_secs));
    let mut again = bad.clone();
    again.nonce = "n8".into();
    let repeat = protocol.repeat_nack(&again);
    assert_eq!(repeat.response_nonce, "n8");
    assert_eq!(repeat.error_detail, first.error_detail);
    // Same version, other content (a restarted control plane counting from 1 again): judged.
    assert!(matches!(
        protocol.judge(&response("7", "bad2", 0)),
        Judgment::Compile(_)
    ));
    let ack = answer(&mut protocol, &response("8", "fixed", 3));
    assert!(ack.error_detail.is_none());
    assert!(
        matches!(protocol.judge(&bad), Judgment::Compile(_)),
        "rejection forgotten"
    );
}

/// Resources that are not RateLimitConfigs are NACKed like rules that do not compile.
#[test]
fn undecodable_resources_are_nacked() {
    let mut protocol = Protocol::new("n", &[]);
    let mut odd = response("1", "d", 5);
    odd.resources[0].type_url = "type.googleapis.com/google.protobuf.Empty".into();
    let nack = answer(&mut protocol, &odd);
    let message = nack.error_detail.expect("nack").message;
    assert!(
        message.starts_with("resource 0: resource type "),
        "{message}"
    );
    assert_eq!(nack.version_info, "");
}

/// A NACK message with many errors is cut, saying how many were left out.
#[test]
fn long_nack_messages_are_cut() {
    let error = |i: usize| ConfigError {
        location: Location {
            file: format!("policy-{i}").into(),
            line: None,
            col: None,
        },
        message: "x".repeat(100),
    };
    let errors = ConfigErrors((0..1000).map(error).collect());
    let message = nack_message(&errors);
    assert!(message.len() <= MAX_NACK_MESSAGE + 40, "{}", message.len());
    assert!(message.starts_with("policy-0: xxx"));
    assert!(
        message.ends_with(" more"),
        "{}",
        &message[message.len() - 30..]
    );
}

/// A response of another type than the subscribed one is not judged at all (neither ACK nor
/// NACK), and leaves the version in force alone.
#[test]
fn responses_of_another_type_are_ignored() {
    let mut protocol = Protocol::new("n", &[]);
    answer(&mut protocol, &response("1", "a", 5));
    let mut foreign = response("2", "b", 5);
    foreign.type_url = "type.googleapis.com/envoy.config.cluster.v3.Cluster".into();
    assert!(matches!(protocol.judge(&foreign), Judgment::Foreign));
    foreign.type_url = String::new();
    assert!(matches!(protocol.judge(&foreign), Judgment::Foreign));
    assert_eq!(protocol.subscribe().version_info, "1");
}

/// The rules in force sent again (a reconnect) are ACKed without compiling; the same resources
/// under a new version, or a new rule set under the same version, are compiled.
#[test]
fn the_rules_in_force_again_are_not_compiled_again() {
    let mut protocol = Protocol::new("n", &[]);
    let first = response("7", "a", 5);
    answer(&mut protocol, &first);
    let mut again = first.clone();
    again.nonce = "n7-again".into();
    assert!(matches!(protocol.judge(&again), Judgment::Unchanged));
    let ack = protocol.accepted(&again);
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("7", "n7-again")
    );
    assert!(ack.error_detail.is_none());
    let renamed = response("8", "a", 5);
    assert!(matches!(protocol.judge(&renamed), Judgment::Compile(_)));
    let changed = response("7", "a", 6);
    assert!(matches!(protocol.judge(&changed), Judgment::Compile(_)));
}
