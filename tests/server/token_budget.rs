//! Token budgets in process: a check with 0 hits on the request path and a charge of the tokens
//! used at stream end, as Envoy sends them; the budget recorded past its limit
//! (`record_over_limit`), read through the admin listener.

use std::sync::Arc;

use sluice::proto::RateLimitDescriptor;
use sluice::proto::well_known::UInt64Value;
use sluice::store::MemoryStore;

use crate::common::admin;
use crate::common::{OK, OVER, TestServer, call, descriptor, header, request};

/// A tenant's budget of 100 a minute, recorded past the limit, and an ordinary limit of 5.
const RULES: &str = include_str!("../fixtures/budgets/token_budget.yaml");

/// The same budget without the field.
fn unrecorded() -> String {
    RULES.replace(", record_over_limit: true", "")
}

/// The tenant's descriptor with `hits` (0: the check).
fn tenant(hits: u64) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..descriptor(&[("tenant", "acme")])
    }
}

/// Eight requests, each checked then charged 30 tokens: the codes of the checks.
async fn eight_requests(server: &TestServer) -> Vec<i32> {
    let mut client = server.client().await;
    let mut checks = Vec::new();
    for _ in 0..8 {
        let check = call(&mut client, request("llm", vec![tenant(0)])).await;
        checks.push(check.overall_code);
        if check.overall_code == OK {
            call(&mut client, request("llm", vec![tenant(30)])).await;
        }
    }
    checks
}

/// Issue 43's scenario: the fourth charge crosses the budget (90 + 30) and is recorded, so the
/// fifth check is refused with a Retry-After; the admin listener reads the 120 tokens charged.
/// Without the field the tenant is never stopped (the refused charge consumed nothing).
#[tokio::test]
async fn a_budget_recorded_past_its_limit_stops_the_tenant() {
    let server = admin::start(RULES, Arc::new(MemoryStore::new())).await;
    assert_eq!(
        eight_requests(&server).await,
        [OK, OK, OK, OK, OVER, OVER, OVER, OVER]
    );
    let mut client = server.client().await;
    let refused = call(&mut client, request("llm", vec![tenant(0)])).await;
    assert!(header(&refused, "retry-after").is_some(), "{refused:?}");
    let read = admin::get(&server, "domain=llm&descriptor=tenant=acme").await;
    let limit = &read.body["limits"][0];
    assert_eq!(limit["record_over_limit"], true, "{}", read.body);
    assert_eq!(limit["counters"][0]["used"], 120, "{}", read.body);
    assert_eq!(limit["counters"][0]["admits"], false);

    let unrecorded = TestServer::start(&unrecorded()).await;
    assert_eq!(eight_requests(&unrecorded).await, [OK; 8]);
}

/// All-or-nothing across a call's descriptors: a recorded charge that crosses its budget refuses
/// the call and the ordinary descriptor beside it consumes nothing; a recorded charge in a call an
/// ordinary descriptor refuses is kept (the tokens were spent).
#[tokio::test]
async fn a_recorded_charge_and_an_ordinary_descriptor_in_one_call() {
    let server = admin::start(RULES, Arc::new(MemoryStore::new())).await;
    let mut client = server.client().await;
    let route = |hits| RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: hits }),
        ..descriptor(&[("route", "/chat")])
    };
    call(&mut client, request("llm", vec![tenant(90)])).await;
    let crossing = call(&mut client, request("llm", vec![route(1), tenant(30)])).await;
    assert_eq!(crossing.overall_code, OVER);
    let check = call(&mut client, request("llm", vec![route(0)])).await;
    assert_eq!(
        check.statuses[0].limit_remaining, 5,
        "the route was not charged"
    );

    let refused = call(&mut client, request("llm", vec![tenant(5), route(6)])).await;
    assert_eq!(refused.overall_code, OVER);
    let read = admin::get(&server, "domain=llm&descriptor=tenant=acme").await;
    assert_eq!(
        read.body["limits"][0]["counters"][0]["used"], 125,
        "{}",
        read.body
    );
}
