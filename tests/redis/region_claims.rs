//! Regions' claims on a real Redis (`portion.lua`'s region mode) against the global store's
//! rules in one process (`region::GlobalStoreModel`, which the bound's property test runs):
//! the same random claims, answered alike; and every key of the regions in one cluster slot.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice::clock::{MILLI, Nanos, SECOND};
use sluice::region::GlobalStoreModel;
use sluice::store::redis::RedisClock;
use sluice::store::{
    BucketId, RedisSettings, RedisStore, RegionAnswer, RegionClaim, RegionTerms, Store,
};

use crate::common::redis::RedisServer;

/// A time on the caller's clock (microseconds reach the script).
const T0: Nanos = 1_767_225_600 * SECOND;

fn unit(n: usize) -> BucketId {
    [(String::new(), format!("{n:04x}"))].into()
}

/// Whether two answers agree: floors and counts exactly, portions to the part per million
/// (the script sums demands in another order than the model, which may move a rounding),
/// demands to float precision.
fn agree(redis: &RegionAnswer, model: &RegionAnswer) -> bool {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    redis.membership == model.membership
        && redis.claimed.len() == model.claimed.len()
        && redis.claimed.iter().zip(&model.claimed).all(|(r, m)| {
            (r.portion - m.portion).abs() <= 1.5e-6
                && close(r.region_demand, m.region_demand)
                && close(r.others_demand, m.others_demand)
                && r.others == m.others
        })
}

/// 600 random claims of four regions (one of two replicas), at random times, demands, held
/// portions and floors, with lapses, member timeouts and floors settling along the way: Redis
/// answers each exactly as the model does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn the_script_claims_as_the_model_does() {
    let redis = RedisServer::start();
    let settings = RedisSettings {
        clock: RedisClock::Caller,
        timeout: Duration::from_secs(2),
        ..RedisSettings::new(redis.url())
    };
    let store = RedisStore::connect(settings).await.expect("redis store");
    let store = store.portion_store().expect("portions on redis");
    let model = GlobalStoreModel::new();
    let mut rng = fastrand::Rng::with_seed(42);
    let mut now = T0;
    // What each replica enforces: its floor, and its portion per unit.
    let mut held: BTreeMap<(usize, usize), (f64, BTreeMap<usize, f64>)> = BTreeMap::new();
    let names = ["eu", "us", "ap", "sa"];
    // What the sequence went through: settled floors, several members, split portions.
    let (mut floors, mut crowded, mut split) = (0, 0, 0);
    for step in 0..600 {
        now += rng.u64(0..2_500) * MILLI;
        if step % 150 == 149 {
            // Long silences: portions lapse, floors settle, members time out.
            now += 70 * SECOND;
        }
        let (region, replica) = (rng.usize(0..4), rng.usize(0..2));
        let mine = held.entry((region, replica)).or_default();
        let count = rng.usize(1..4);
        let claims: Vec<RegionClaim> = (0..count)
            .map(|_| {
                let n = rng.usize(0..6);
                RegionClaim {
                    domain: "edge".into(),
                    bucket: unit(n),
                    demand: [0.0, 5.0, 40.0, 100.0, 250.0][rng.usize(0..5)] * rng.f64(),
                    rate: if rng.usize(0..10) == 0 { 0.0 } else { 100.0 },
                    held: mine.1.get(&n).copied().unwrap_or(0.0),
                    ttl: if rng.bool() { 3 * SECOND } else { 14 * SECOND },
                }
            })
            .collect();
        let replica_name = format!("replica-{replica}");
        let terms = RegionTerms {
            region: names[region],
            replica: &replica_name,
            now,
            floor: [0.5 / 4.0, 0.5 / 3.0, 0.25, 0.0][rng.usize(0..4)],
            floor_held: mine.0,
            member_ttl: 60 * SECOND,
        };
        let from_redis = store
            .claim_in_region(terms, &claims)
            .await
            .expect("redis answers");
        let from_model = model.claim_now(&terms, &claims);
        assert!(
            agree(&from_redis, &from_model),
            "step {step}: {terms:?} {claims:?}\nredis {from_redis:?}\nmodel {from_model:?}"
        );
        floors += usize::from(from_redis.membership.floor > 0.0);
        crowded += usize::from(from_redis.membership.members >= 3);
        split += (from_redis.claimed.iter())
            .filter(|c| c.portion > 0.0 && c.portion < 1.0)
            .count();
        mine.0 = from_redis.membership.floor;
        for (claim, answer) in claims.iter().zip(&from_redis.claimed) {
            let n = usize::from_str_radix(&claim.bucket[""], 16).unwrap();
            mine.1.insert(n, answer.portion);
        }
    }
    assert!(
        floors > 100 && crowded > 100 && split > 100,
        "{floors} {crowded} {split}"
    );
}

/// A region name the members' fields cannot hold is refused before anything is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_bad_region_name_is_refused() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(RedisSettings::new(redis.url()))
        .await
        .expect("redis store");
    let store = store.portion_store().expect("portions on redis");
    let terms = RegionTerms {
        region: "eu|west",
        replica: "r",
        now: T0,
        floor: 0.25,
        floor_held: 0.0,
        member_ttl: 60 * SECOND,
    };
    let error = store.claim_in_region(terms, &[]).await.unwrap_err();
    assert!(error.to_string().contains("region name"), "{error}");
}

/// What the global store spends on regions' claims (for docs/regions.md's sizing): three regions
/// of two replicas each claim the same 200 units a round for 20 rounds. Prints Redis's CPU per
/// unit claimed (`INFO commandstats`) and the memory the units take; judges only that every
/// claim was answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn what_claims_cost_the_global_store() {
    let redis = RedisServer::start();
    let store = RedisStore::connect(RedisSettings::new(redis.url()))
        .await
        .expect("redis store");
    let store = store.portion_store().expect("portions on redis");
    let before: f64 = used_memory(&redis);
    let mut answered = 0;
    for round in 0..20u64 {
        for (region, replica) in [
            ("eu", "r0"),
            ("eu", "r1"),
            ("us", "r0"),
            ("us", "r1"),
            ("ap", "r0"),
            ("ap", "r1"),
        ] {
            let claims: Vec<RegionClaim> = (0..200)
                .map(|n| RegionClaim {
                    domain: "edge".into(),
                    bucket: unit(n),
                    demand: 10.0 + (n % 7) as f64 * round as f64,
                    rate: 100.0,
                    held: 0.0,
                    ttl: 3 * SECOND,
                })
                .collect();
            let terms = RegionTerms {
                region,
                replica,
                now: T0,
                floor: 0.5 / 3.0,
                floor_held: 0.0,
                member_ttl: 3600 * SECOND,
            };
            let answer = store
                .claim_in_region(terms, &claims)
                .await
                .expect("answered");
            answered += answer.claimed.len();
        }
    }
    assert_eq!(answered, 20 * 6 * 200);
    let stats = redis.cli(&["INFO", "commandstats"]);
    let line = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .unwrap_or_default()
        .to_owned();
    let field = |name: &str| -> f64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|v| v.split(',').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let per_unit = field("usec") / answered as f64;
    let memory = (used_memory(&redis) - before) / 200.0;
    eprintln!(
        "global store: {} script runs, {:.1} us a run, {per_unit:.2} us of Redis CPU per unit \
         claimed (6 replicas on each unit); {memory:.0} bytes per unit held by 6 replicas; {}",
        field("calls"),
        field("usec_per_call"),
        line
    );
}

fn used_memory(redis: &RedisServer) -> f64 {
    redis
        .cli(&["INFO", "memory"])
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}
