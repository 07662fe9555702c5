//! Replicas' portions of RLQS limits on a real Redis: replicas (stores on one server) split a
//! bucket's limit, a lowered claim frees room for the others, a replica that stops claiming
//! frees its portion after the ttl and its floor when its membership ends, a store that lost its
//! portions grants no more than each replica holds until it settles, an earlier version's field
//! counts whole, the reservations never sum past the whole limit under concurrent claims, and a
//! cluster spreads buckets over its nodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice::clock::{Nanos, SECOND};
use sluice::rlqs::{BucketId, Claim, ClaimTerms, Claimed, PortionStore};
use sluice::store::redis::RedisClock;
use sluice::store::{RedisSettings, RedisStore, Store, StoreError};

use crate::common::eventually;
use crate::common::redis::{RedisCluster, RedisServer, free_port};

/// A time on the caller's clock (the stores of most tests run on it, so the test drives time).
const T0: Nanos = 1_767_225_600 * SECOND;

/// A portion lasts this long unless claimed again.
const TTL: Nanos = 10 * SECOND;

/// Where a store on `url`, with `clock`, holds portions.
async fn portions_on(url: &str, clock: RedisClock) -> Arc<dyn PortionStore> {
    let settings = RedisSettings {
        clock,
        timeout: Duration::from_secs(2),
        ..RedisSettings::new(url)
    };
    let store = RedisStore::connect(settings).await.expect("redis store");
    store
        .portion_store()
        .expect("the redis store holds portions")
}

fn bucket(name: &str) -> BucketId {
    [("name".to_string(), name.to_string())].into()
}

/// The terms of a claim by `replica` at `now`, holding `ttl` (floors no longer, no settling).
fn terms(replica: &str, now: Nanos, ttl: Nanos) -> ClaimTerms<'_> {
    ClaimTerms {
        replica,
        now,
        ttl,
        member_for: ttl,
        settle: 0,
    }
}

fn claim(name: &str, wanted: f64, demand: f64) -> Claim {
    held(name, wanted, demand, 0.0)
}

/// A claim declaring it holds `held` of the limit.
fn held(name: &str, wanted: f64, demand: f64, held: f64) -> Claim {
    Claim {
        domain: "edge".into(),
        bucket: bucket(name),
        demand,
        wanted,
        held,
        reserve_longer: 0,
    }
}

/// One bucket claimed by `replica` at `now`, with the default ttl.
async fn one(store: &dyn PortionStore, replica: &str, claim: Claim, now: Nanos) -> Claimed {
    let claimed = store
        .claim(terms(replica, now, TTL), std::slice::from_ref(&claim))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    claimed[0]
}

/// The first replica gets what it wants, the second only the rest; when the first lowers its
/// claim, the second gets more on its next claim; each sees the other's demand.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn replicas_split_a_bucket() {
    let redis = RedisServer::start();
    let a = portions_on(&redis.url(), RedisClock::Caller).await;
    let b = portions_on(&redis.url(), RedisClock::Caller).await;

    let first = one(&*a, "a", claim("web", 0.7, 70.0), T0).await;
    assert_eq!(
        (first.portion, first.others, first.others_demand),
        (0.7, 0, 0.0)
    );
    let second = one(&*b, "b", claim("web", 0.6, 40.0), T0 + 1).await;
    assert_eq!((second.portion, second.others), (0.3, 1));
    assert_eq!(second.others_demand, 70.0);

    // Claiming again keeps a portion (its own is not counted against it).
    let renewed = one(&*a, "a", claim("web", 0.7, 70.0), T0 + SECOND).await;
    assert_eq!(
        (renewed.portion, renewed.others, renewed.others_demand),
        (0.7, 1, 40.0)
    );

    // a lowers its claim: b's next claim gets what it wants.
    assert_eq!(
        one(&*a, "a", claim("web", 0.2, 20.0), T0 + 2 * SECOND)
            .await
            .portion,
        0.2
    );
    let more = one(&*b, "b", claim("web", 0.6, 40.0), T0 + 2 * SECOND).await;
    assert_eq!((more.portion, more.others_demand), (0.6, 20.0));
    // And a, wanting everything again, gets only what b leaves.
    let back = one(&*a, "a", claim("web", 1.0, 90.0), T0 + 3 * SECOND).await;
    assert!((back.portion - 0.4).abs() < 1e-9, "{back:?}");

    // One hash per bucket, one field per replica, expiring by itself.
    let key = String::from_utf8(sluice_key("edge", "web")).unwrap();
    assert_eq!(redis.cli(&["HLEN", &key]).trim(), "2");
    let pttl: i64 = redis.cli(&["PTTL", &key]).trim().parse().unwrap();
    assert!(pttl > 0 && pttl <= (TTL / 1_000_000) as i64, "PTTL {pttl}");
}

/// The key the store uses for `name` in `domain` (as the unit tests pin it).
fn sluice_key(domain: &str, name: &str) -> Vec<u8> {
    let mut identity = Vec::new();
    for part in [domain, "name", name] {
        identity.extend_from_slice(&(part.len() as u64).to_le_bytes());
        identity.extend_from_slice(part.as_bytes());
    }
    let tag = identity.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("sluice:quota:{{{tag:016x}}}").into_bytes()
}

/// A replica that stops claiming holds its portion until the ttl, then frees it (and its field
/// is dropped); buckets are independent.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_silent_replica_frees_its_portion_after_the_ttl() {
    let redis = RedisServer::start();
    let a = portions_on(&redis.url(), RedisClock::Caller).await;
    let b = portions_on(&redis.url(), RedisClock::Caller).await;

    let claims = [claim("web", 1.0, 10.0), claim("api", 0.5, 5.0)];
    let held = a.claim(terms("a", T0, TTL), &claims).await.unwrap();
    assert_eq!((held[0].portion, held[1].portion), (1.0, 0.5));

    // Just before a's portions lapse, b gets nothing of web and the rest of api.
    let before = b
        .claim(terms("b", T0 + TTL - 1_000, TTL), &claims)
        .await
        .unwrap();
    assert_eq!((before[0].portion, before[0].others), (0.0, 1));
    assert_eq!((before[1].portion, before[1].others), (0.5, 1));

    // From the ttl on, a holds nothing: b gets everything it wants and sees no other replica.
    let after = b.claim(terms("b", T0 + TTL, TTL), &claims).await.unwrap();
    assert_eq!(
        (after[0].portion, after[0].others, after[0].others_demand),
        (1.0, 0, 0.0)
    );
    assert_eq!((after[1].portion, after[1].others), (0.5, 0));
    let key = String::from_utf8(sluice_key("edge", "web")).unwrap();
    assert_eq!(redis.cli(&["HKEYS", &key]).trim(), "b");

    // a comes back: b's portions stand until they lapse.
    let late = a
        .claim(terms("a", T0 + TTL + 1_000, TTL), &claims)
        .await
        .unwrap();
    assert_eq!((late[0].portion, late[1].portion), (0.0, 0.5));
}

/// A replica that stops claiming keeps its floor (the smaller of its portion and an equal part
/// among the bucket's members) reserved from its portion's ttl until its membership ends; then
/// the others get everything.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_silent_member_keeps_its_floor_until_its_membership_ends() {
    let redis = RedisServer::start();
    let a = portions_on(&redis.url(), RedisClock::Caller).await;
    let b = portions_on(&redis.url(), RedisClock::Caller).await;
    let member = 3 * TTL;
    let with_floor = |r, now| ClaimTerms {
        member_for: member,
        ..terms(r, now, TTL)
    };
    let first = a
        .claim(with_floor("a", T0), &[claim("web", 0.8, 8.0)])
        .await;
    let first = first.unwrap()[0];
    // Alone, a's floor is all of its portion.
    assert_eq!((first.portion, first.floor), (0.8, 0.8));
    let second = b
        .claim(with_floor("b", T0 + 1), &[claim("web", 1.0, 9.0)])
        .await;
    assert_eq!(second.unwrap()[0].portion.to_bits(), 0.2f64.to_bits());
    let renewed = a
        .claim(with_floor("a", T0 + 2), &[claim("web", 0.8, 8.0)])
        .await;
    // Two members: a keeps at most half through an outage.
    assert_eq!((renewed.unwrap()[0]).floor, 0.5);
    // a stops claiming. Within its ttl its portion stands; after it, only its floor.
    let wanting = [claim("web", 1.0, 9.0)];
    let b_at = |now| b.claim(with_floor("b", now), &wanting);
    assert_eq!(
        b_at(T0 + TTL - SECOND).await.unwrap()[0].portion.to_bits(),
        0.2f64.to_bits()
    );
    let floor_only = b_at(T0 + TTL + 3).await.unwrap()[0];
    assert_eq!((floor_only.portion, floor_only.others), (0.5, 0));
    // Once its membership is over, nothing.
    let alone = b_at(T0 + member + 3).await.unwrap()[0];
    assert_eq!((alone.portion, alone.floor), (1.0, 1.0));
}

/// A bucket whose shares live longer (its streams report every 30 s) keeps its portion, and
/// then its floor, reserved that much longer than the terms say; the bucket beside it claimed
/// without it lapses on time.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_longer_reservation_holds_the_portion_and_floor_longer() {
    let redis = RedisServer::start();
    let a = portions_on(&redis.url(), RedisClock::Caller).await;
    let b = portions_on(&redis.url(), RedisClock::Caller).await;
    let (member, longer) = (3 * TTL, TTL);
    let at = |r, now| ClaimTerms {
        member_for: member,
        ..terms(r, now, TTL)
    };
    let slow = Claim {
        reserve_longer: longer,
        ..claim("slow", 0.8, 8.0)
    };
    let got = a.claim(at("a", T0), &[slow, claim("fast", 0.8, 8.0)]).await;
    let got = got.unwrap();
    assert_eq!((got[0].portion, got[1].portion), (0.8, 0.8));
    let wanting = [claim("slow", 1.0, 9.0), claim("fast", 1.0, 9.0)];
    let b_at = |now| b.claim(at("b", now), &wanting);
    // Past the ttl: the fast bucket is down to a's floor (all of it, a was alone), the slow
    // one still reserves the whole portion: b is refused both.
    let after_ttl = b_at(T0 + TTL + 1).await.unwrap();
    assert_eq!((after_ttl[0].portion, after_ttl[0].others), (0.2, 1));
    assert_eq!((after_ttl[1].portion, after_ttl[1].others), (0.2, 0));
    // Past the ttl and the longer reservation: the slow one is down to its floor.
    let after_longer = b_at(T0 + TTL + longer + 1).await.unwrap();
    assert_eq!((after_longer[0].portion, after_longer[0].others), (0.2, 0));
    // Past the membership: the fast bucket is free, the slow one is not yet.
    let after_member = b_at(T0 + member + 1).await.unwrap();
    assert_eq!(after_member[1].portion, 1.0);
    assert_eq!(after_member[0].portion.to_bits(), 0.2f64.to_bits());
    // Past the membership and the longer reservation: both free.
    let free = b_at(T0 + member + longer + 1).await.unwrap();
    assert_eq!((free[0].portion, free[1].portion), (1.0, 1.0));
}

/// A store that lost its portions (a restart without them) grants no replica more than it
/// declares it holds while it settles, so a replica that started meanwhile cannot take the limit
/// from the ones still spending theirs; once settled, the usual split.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn an_emptied_store_grants_what_is_held_until_it_settles() {
    let redis = RedisServer::start();
    let a = portions_on(&redis.url(), RedisClock::Caller).await;
    let b = portions_on(&redis.url(), RedisClock::Caller).await;
    let c = portions_on(&redis.url(), RedisClock::Caller).await;
    let settle = 3 * SECOND;
    let settling = |r, now| ClaimTerms {
        settle,
        ..terms(r, now, TTL)
    };
    // A brand-new store settles too: nobody holds anything yet.
    let fresh = a
        .claim(settling("a", T0), &[claim("web", 0.6, 6.0)])
        .await
        .unwrap()[0];
    assert_eq!((fresh.portion, fresh.settling), (0.0, true));
    let later = T0 + settle;
    let got = a
        .claim(settling("a", later), &[claim("web", 0.6, 6.0)])
        .await
        .unwrap()[0];
    assert_eq!((got.portion, got.settling), (0.6, false));
    let got = b
        .claim(settling("b", later + 1), &[claim("web", 1.0, 4.0)])
        .await
        .unwrap()[0];
    assert_eq!(got.portion.to_bits(), 0.4f64.to_bits());
    redis.cli(&["FLUSHALL"]);
    // c started meanwhile and wants everything: it gets nothing while the store settles.
    let t = later + 2 * SECOND;
    let newcomer = c
        .claim(settling("c", t), &[held("web", 1.0, 10.0, 0.0)])
        .await
        .unwrap()[0];
    assert_eq!((newcomer.portion, newcomer.settling), (0.0, true));
    // a and b get back what they hold, wanting more or not.
    let a_back = a
        .claim(settling("a", t + 1), &[held("web", 1.0, 6.0, 0.6)])
        .await
        .unwrap()[0];
    assert_eq!(a_back.portion, 0.6);
    let b_back = b
        .claim(settling("b", t + 2), &[held("web", 0.4, 4.0, 0.4)])
        .await
        .unwrap()[0];
    assert_eq!(b_back.portion.to_bits(), 0.4f64.to_bits());
    // Settled: c gets what the others leave.
    let settled = t + settle;
    let c_then = c
        .claim(settling("c", settled), &[claim("web", 1.0, 10.0)])
        .await
        .unwrap()[0];
    assert_eq!((c_then.portion, c_then.settling), (0.0, false));
    let a_less = a
        .claim(settling("a", settled + 1), &[held("web", 0.1, 1.0, 0.6)])
        .await;
    assert_eq!(a_less.unwrap()[0].portion, 0.1);
    let c_more = c
        .claim(settling("c", settled + 2), &[claim("web", 1.0, 10.0)])
        .await
        .unwrap()[0];
    assert_eq!(c_more.portion, 0.5);
}

/// A field written by an earlier version (portion, expiry, demand) counts as its whole portion
/// until its expiry, and its demand is read.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn an_earlier_version_s_field_counts_whole() {
    let redis = RedisServer::start();
    let b = portions_on(&redis.url(), RedisClock::Caller).await;
    let key = String::from_utf8(sluice_key("edge", "web")).unwrap();
    let until = (T0 + TTL) / 1_000;
    redis.cli(&["HSET", &key, "old", &format!("600000 {until} 12.5")]);
    let got = b
        .claim(terms("b", T0, TTL), &[claim("web", 1.0, 1.0)])
        .await
        .unwrap()[0];
    assert_eq!((got.portion, got.others, got.others_demand), (0.4, 1, 12.5));
    let after = b
        .claim(terms("b", T0 + TTL, TTL), &[claim("web", 1.0, 1.0)])
        .await;
    assert_eq!(after.unwrap()[0].portion, 1.0);
}

/// On Redis's own clock (production), a lapsed portion is freed after a short real ttl, and a
/// bucket's hash is gone once every portion has lapsed.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn portions_lapse_on_redis_time() {
    let redis = RedisServer::start();
    let a = portions_on(&redis.url(), RedisClock::Server).await;
    let b = portions_on(&redis.url(), RedisClock::Server).await;
    let ttl = 200 * 1_000_000;
    let web = [claim("web", 1.0, 1.0)];
    assert_eq!(
        a.claim(terms("a", 0, ttl), &web).await.unwrap()[0].portion,
        1.0
    );
    // b gets the whole bucket once a's portion has lapsed (it may be that soon already).
    eventually(Duration::from_secs(10), "a's portion lapses", async || {
        b.claim(terms("b", 0, ttl), &web).await.unwrap()[0].portion == 1.0
    })
    .await;
    let key = String::from_utf8(sluice_key("edge", "web")).unwrap();
    eventually(Duration::from_secs(10), "the hash expires", async || {
        redis.cli(&["EXISTS", &key]).trim() == "0"
    })
    .await;
}

/// Sums the reservations of each bucket at Redis's time, atomically with the claims (a
/// script): a portion within its ttl, else a floor within its membership. The largest sum, in
/// parts per million.
const LIVE_SUM: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local most = 0
for _, key in ipairs(KEYS) do
  local fields, sum = redis.call('HGETALL', key), 0
  for j = 2, #fields, 2 do
    local portion, member, floor, until_us =
      string.match(fields[j], '^(%d+) (%d+) [^;]*;(%d+);(%d+)$')
    if tonumber(until_us) > now then
      sum = sum + tonumber(portion)
    elseif tonumber(member) > now then
      sum = sum + tonumber(floor)
    end
  end
  if sum > most then most = sum end
end
return most
";

/// A small deterministic generator (xorshift64*), so a failure replays.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Many replicas claiming at random concurrently, on Redis's clock with a short ttl and a
/// longer membership (so portions lapse to floors and are taken over during the run): the
/// reservations of a bucket never sum past the whole limit, checked atomically while they run,
/// and no one gets more than it wants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn live_portions_never_exceed_the_limit() {
    let redis = RedisServer::start();
    let names = ["web", "api", "img"];
    let mut stores = Vec::new();
    for _ in 0..3 {
        stores.push(portions_on(&redis.url(), RedisClock::Server).await);
    }
    let running = Arc::new(AtomicBool::new(true));
    let checker = {
        let running = running.clone();
        let client = redis::Client::open(redis.url()).unwrap();
        let keys: Vec<Vec<u8>> = names.iter().map(|n| sluice_key("edge", n)).collect();
        tokio::spawn(async move {
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let (mut most, mut checks) = (0i64, 0u32);
            while running.load(Ordering::Relaxed) || checks == 0 {
                let mut cmd = redis::cmd("EVAL");
                cmd.arg(LIVE_SUM).arg(keys.len()).arg(&keys);
                let sum: i64 = cmd.query_async(&mut conn).await.unwrap();
                most = most.max(sum);
                checks += 1;
            }
            (most, checks)
        })
    };
    let mut tasks = Vec::new();
    for r in 0..12u64 {
        let store = stores[r as usize % stores.len()].clone();
        tasks.push(tokio::spawn(async move {
            let replica = format!("r{r}");
            let mut state = 0x9e37_79b9_7f4a_7c15 ^ (r + 1);
            for _ in 0..150 {
                let mut claims = Vec::new();
                for n in names {
                    // Each bucket in two claims of three, wanting 0 to all of it.
                    if !next(&mut state).is_multiple_of(3) {
                        let wanted = (next(&mut state) % 1001) as f64 / 1000.0;
                        // One in four reserved up to 40 ms longer (streams that report less
                        // often).
                        let reserve_longer = match next(&mut state) % 4 {
                            0 => next(&mut state) % 41 * 1_000_000,
                            _ => 0,
                        };
                        claims.push(Claim {
                            reserve_longer,
                            ..claim(n, wanted, 1.0)
                        });
                    }
                }
                // 5 to 50 ms: some portions lapse while others are claimed again; floors
                // last up to 50 ms more.
                let ttl = (5 + next(&mut state) % 46) * 1_000_000;
                let member_for = ttl + next(&mut state) % 50 * 1_000_000;
                let terms = ClaimTerms {
                    member_for,
                    ..terms(&replica, 0, ttl)
                };
                let claimed = store.claim(terms, &claims).await.unwrap();
                for (c, g) in claims.iter().zip(&claimed) {
                    assert!((0.0..=c.wanted).contains(&g.portion), "{c:?} got {g:?}");
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    running.store(false, Ordering::Relaxed);
    let (most, checks) = checker.await.unwrap();
    assert!(most <= 1_000_000, "live portions summed to {most} ppm");
    assert!(
        most > 0 && checks > 0,
        "the checker saw portions ({most}, {checks} checks)"
    );
}

/// On a cluster, buckets spread over the nodes (each bucket one slot, each slot group one
/// run), and each is split as on one Redis.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_cluster_splits_every_bucket() {
    let cluster = RedisCluster::start();
    let a = portions_on(&cluster.url(), RedisClock::Caller).await;
    let b = portions_on(&cluster.url(), RedisClock::Caller).await;
    let names: Vec<String> = (0..30).map(|i| format!("b{i}")).collect();
    let wanting = |wanted| -> Vec<Claim> { names.iter().map(|n| claim(n, wanted, 1.0)).collect() };
    let first = a.claim(terms("a", T0, TTL), &wanting(0.75)).await.unwrap();
    assert!(first.iter().all(|g| g.portion == 0.75), "{first:?}");
    let second = b.claim(terms("b", T0, TTL), &wanting(0.5)).await.unwrap();
    assert!(
        second.iter().all(|g| g.portion == 0.25 && g.others == 1),
        "{second:?}"
    );
    let used = cluster.nodes.iter().filter(|n| n.dbsize() > 0).count();
    assert!(used >= 2, "30 buckets on {used} node(s)");
}

/// An unreachable Redis fails the claim with a transient error (the caller keeps its last
/// portions until they lapse).
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn an_unreachable_redis_fails_the_claim() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let store = RedisStore::new(RedisSettings::new(url)).expect("store");
    let portions = store.portion_store().expect("a portion store");
    let failed = portions
        .claim(terms("a", T0, TTL), &[claim("web", 1.0, 1.0)])
        .await
        .expect_err("nothing listens");
    let failed = failed.downcast_ref::<StoreError>().expect("a store error");
    assert!(failed.is_transient(), "{failed}");
}
