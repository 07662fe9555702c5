//! The bytes `write` makes of a decision decode to exactly the response `to_proto` builds from it.

use std::borrow::Cow;
use std::sync::Arc;

use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::limiter::{Code, HeaderText, RateLimitItem, ReportedLimit, StoreUse};
use crate::proto::RateLimitResponse;
use crate::rules::Unit;
use crate::service::to_proto;

fn decoded(decision: &Decision) -> RateLimitResponse {
    let mut bytes = Vec::new();
    write(decision, &mut bytes);
    RateLimitResponse::decode(bytes.as_slice()).expect("the written decision decodes")
}

fn code() -> impl Strategy<Value = Code> {
    prop_oneof![Just(Code::Ok), Just(Code::OverLimit)]
}

fn unit() -> impl Strategy<Value = Option<Unit>> {
    prop_oneof![
        Just(None),
        Just(Some(Unit::Second)),
        Just(Some(Unit::Minute)),
        Just(Some(Unit::Hour)),
        Just(Some(Unit::Day)),
        Just(Some(Unit::Week)),
        Just(Some(Unit::Month)),
        Just(Some(Unit::Year)),
    ]
}

fn status() -> impl Strategy<Value = DescriptorStatus> {
    let limit = (any::<u32>(), unit(), proptest::option::of(".{0,40}")).prop_map(
        |(requests_per_unit, unit, name)| ReportedLimit {
            requests_per_unit,
            unit,
            name: name.map(Arc::from),
        },
    );
    (
        code(),
        proptest::option::of(limit),
        any::<u32>(),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(code, limit, remaining, reset_after)| DescriptorStatus {
            code,
            limit,
            remaining,
            reset_after,
        })
}

fn metadata() -> impl Strategy<Value = Option<serde_json::Map<String, serde_json::Value>>> {
    let value = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<u32>().prop_map(serde_json::Value::from),
        ".{0,10}".prop_map(serde_json::Value::from),
    ];
    proptest::option::of(proptest::collection::btree_map(".{0,8}", value, 0..4))
        .prop_map(|map| map.map(|m| m.into_iter().collect()))
}

/// Every kind of header value: empty, long enough for a two-byte length, every number.
fn header_text() -> impl Strategy<Value = HeaderText> {
    prop_oneof![
        Just(HeaderText::Static("")),
        Just(HeaderText::Static("no-store")),
        ".{0,300}".prop_map(|text| HeaderText::Shared(Arc::from(text))),
        any::<u64>().prop_map(HeaderText::Number),
        // Any text as a policy: names holding `;`, and texts that are no policy item at all.
        (".{0,200}", any::<u32>(), any::<u64>()).prop_map(|(policy, remaining, reset)| {
            HeaderText::Current(RateLimitItem::new(&Arc::from(policy), remaining, reset))
        }),
    ]
}

fn decision() -> impl Strategy<Value = Decision> {
    let header = (
        prop_oneof![
            Just(Cow::Borrowed("RateLimit")),
            ".{0,20}".prop_map(Cow::Owned)
        ],
        header_text(),
    );
    (
        code(),
        proptest::collection::vec(status(), 0..5),
        proptest::collection::vec(header, 0..5),
        metadata(),
    )
        .prop_map(|(code, statuses, headers, dynamic_metadata)| Decision {
            code,
            statuses,
            headers,
            dynamic_metadata,
            store: StoreUse::Skipped,
        })
}

proptest! {
    /// Any decision — every unit, empty and long names, zero and huge numbers, headers long
    /// enough for two-byte lengths, metadata or none — reads back as `to_proto` of it.
    #[test]
    fn a_written_decision_decodes_as_the_generated_response(decision in decision()) {
        prop_assert_eq!(decoded(&decision), to_proto(decision));
    }
}

/// The common decision: one counted descriptor, draft-10 headers.
#[test]
fn an_admitted_call_reads_back_whole() {
    let decision = Decision {
        code: Code::Ok,
        statuses: vec![DescriptorStatus {
            code: Code::Ok,
            limit: Some(ReportedLimit {
                requests_per_unit: 100,
                unit: Some(Unit::Minute),
                name: Some(Arc::from("per_user")),
            }),
            remaining: 99,
            reset_after: Some(60 * crate::clock::SECOND),
        }],
        headers: vec![(
            Cow::Borrowed("RateLimit-Policy"),
            HeaderText::Shared(Arc::from("\"per_user\";q=100;w=60")),
        )],
        dynamic_metadata: None,
        store: StoreUse::Skipped,
    };
    let response = decoded(&decision);
    assert_eq!(response, to_proto(decision));
    assert_eq!(response.statuses[0].limit_remaining, 99);
}

/// Varint lengths at every 7-bit boundary match the bytes written.
#[test]
fn varint_lengths_match_the_bytes_written() {
    for bits in 0..64 {
        for value in [1u64 << bits, (1u64 << bits) - 1] {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, value);
            assert_eq!(bytes.len(), varint_len(value), "{value}");
        }
    }
    assert_eq!(varint_len(u64::MAX), 10);
}
