//! One script run deciding several calls (a batch, as `batch.rs` sends under load) leaves Redis
//! exactly as the same calls in separate runs: the same replies, the same stored state, the
//! same expiry. The script writes an O(1) counter once per run; this holds it to the per-call
//! writes it replaces. The script is called directly, its arguments packed as `apply.lua`
//! documents them (little-endian 64-bit integers).

use redis::aio::MultiplexedConnection;
use sluice::store::redis::SCRIPT;

use crate::common::redis::RedisServer;

/// A multiple of every window here (2 hours), in microseconds.
const T0: i64 = 1_767_225_600 * 1_000_000;
const HOUR: i64 = 3_600 * 1_000_000;

/// One call of one charge on KEYS[1]: `[now, 1, key index, algorithm, requests, window, burst,
/// cost, gate]`.
fn call(now: i64, fields: [i64; 6]) -> Vec<u8> {
    let [algorithm, requests, window, burst, cost, gate] = fields;
    [now, 1, 1, algorithm, requests, window, burst, cost, gate]
        .iter()
        .flat_map(|n| n.to_le_bytes())
        .collect()
}

async fn run(conn: &mut MultiplexedConnection, key: &str, calls: &[Vec<u8>]) -> Vec<u8> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(SCRIPT).arg(1).arg(key);
    for packed in calls {
        cmd.arg(packed.as_slice());
    }
    cmd.query_async(conn).await.expect("the script runs")
}

/// The key's state as text, whatever its type, and its expiry in ms.
async fn state(conn: &mut MultiplexedConnection, key: &str) -> (String, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query_async(conn).await.unwrap();
    let value = match kind.as_str() {
        "hash" => {
            let mut fields: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(key)
                .query_async(conn)
                .await
                .unwrap();
            fields.sort();
            format!("{fields:?}")
        }
        "string" => redis::cmd("GET").arg(key).query_async(conn).await.unwrap(),
        "zset" => {
            let entries: Vec<(String, String)> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(conn)
                .await
                .unwrap();
            format!("{entries:?}")
        }
        other => other.to_owned(),
    };
    let ttl: i64 = redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap();
    (value, ttl)
}

#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn a_batch_leaves_what_separate_runs_leave() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).expect("url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects");
    let window = 2 * HOUR;
    // Per algorithm: requests, window, burst (for envoyproxy/ratelimit's layout, 4: the key's
    // expiry in seconds and the microseconds left in its window).
    let algorithms: [(&str, [i64; 3]); 5] = [
        ("fixed", [0, 3, window]),
        ("sliding", [1, 3, window]),
        ("log", [2, 3, window]),
        ("bucket", [3, 3, window]),
        ("upstream", [4, 3, 7_300]),
    ];
    // Admitted, admitted, a check, admitted, denied (full), then the next window (1 s, 2 s
    // into it, and a call of 2 hits), with a denied advisory charge between.
    let steps: [(i64, i64, i64); 8] = [
        (0, 1, 0),
        (1_000_000, 1, 0),
        (1_500_000, 0, 0),
        (2_000_000, 1, 0),
        (3_000_000, 1, 0),
        (window + 1_000_000, 1, 0),
        (window + 1_500_000, 5, 1),
        (window + 2_000_000, 2, 0),
    ];
    for (name, [algorithm, requests, w]) in algorithms {
        let burst = if algorithm == 4 { HOUR } else { requests };
        let calls: Vec<Vec<u8>> = steps
            .iter()
            .map(|&(at, cost, gate)| call(T0 + at, [algorithm, requests, w, burst, cost, gate]))
            .collect();
        let (batched, separate) = (format!("batched:{name}"), format!("separate:{name}"));
        let together = run(&mut conn, &batched, &calls).await;
        let mut apart = Vec::new();
        for packed in &calls {
            apart.extend(run(&mut conn, &separate, std::slice::from_ref(packed)).await);
        }
        assert_eq!(together, apart, "{name}: the same replies");
        let (one, many) = (
            state(&mut conn, &batched).await,
            state(&mut conn, &separate).await,
        );
        assert_eq!(one.0, many.0, "{name}: the same stored state");
        // Set a few milliseconds apart by this test, to the same deadline (the calls are a
        // second or more apart, so a write that took another call's time would differ by that).
        assert!(
            one.1 > 0 && (one.1 - many.1).abs() < 100,
            "{name}: expiry {one:?} {many:?}"
        );
    }
}
