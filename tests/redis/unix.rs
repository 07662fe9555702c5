//! Redis on a unix socket: `redis+unix://` with a database and credentials in the URL, and
//! envoyproxy/ratelimit's bare socket path with the password from `--redis-password` (the real
//! binary).

use std::sync::Arc;
use std::time::Duration;

use sluice::algorithm::Algorithm;
use sluice::clock::SECOND;
use sluice::store::redis::RedisClock;
use sluice::store::{Charge, Gate, RedisSettings, RedisStore, Store};

use crate::common::process::Sluice;
use crate::common::redis::RedisServer;
use crate::common::{self, OK, OVER, call, connect, limit, one_descriptor};

const PASSWORD: &str = "socket-secret";

/// A Redis listening only on `redis.sock`, with a password.
fn socket_redis() -> (RedisServer, tempfile::TempDir, String) {
    RedisServer::start_on_socket(PASSWORD)
}

fn charge() -> Charge {
    let limit = limit(Algorithm::SlidingLog, 2, 60 * SECOND);
    common::charge("unix", ("k", "v"), limit, 1, Gate::Enforced)
}

async fn store(url: &str, password: Option<&str>) -> Arc<dyn Store> {
    let settings = RedisSettings {
        clock: RedisClock::Server,
        timeout: Duration::from_secs(2),
        password: password.map(str::to_owned),
        ..RedisSettings::new(url)
    };
    Arc::new(RedisStore::connect(settings).await.expect("store"))
}

/// `redis+unix://` and `unix://` with `?db=&pass=`, or the password from the settings; no
/// password, no answer.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn unix_socket_urls() {
    let (redis, _dir, socket) = socket_redis();
    let now = 1_767_225_600 * SECOND;
    let c = charge();
    let in_db2 = store(&format!("redis+unix://{socket}?db=2&pass={PASSWORD}"), None).await;
    let o = in_db2
        .apply(std::slice::from_ref(&c), now)
        .await
        .expect("over the socket");
    assert!(o[0].verdict.admitted && o[0].verdict.remaining == 1);
    assert_eq!(redis.cli(&["-n", "2", "DBSIZE"]).trim(), "1");
    assert_eq!(redis.cli(&["-n", "0", "DBSIZE"]).trim(), "0");
    let overridden = store(&format!("unix://{socket}?db=2&pass=wrong"), Some(PASSWORD)).await;
    let o = overridden
        .apply(std::slice::from_ref(&c), now)
        .await
        .expect("password from settings");
    assert!(
        o[0].verdict.admitted && o[0].verdict.remaining == 0,
        "the same counter in db 2"
    );
    let anonymous = store(&socket, None).await;
    assert!(
        anonymous
            .apply(std::slice::from_ref(&c), now)
            .await
            .is_err()
    );
}

/// The real binary on envoyproxy/ratelimit's bare socket path, with `--redis-password`.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn serve_on_a_bare_socket_path() {
    let (redis, _dir, socket) = socket_redis();
    let rules = "domain: unix\ndescriptors:\n  - key: k\n    rate_limit: { unit: hour, requests_per_unit: 2 }\n";
    let sluice = Sluice::start(
        rules,
        &[
            "--store",
            "redis",
            "--redis-url",
            &socket,
            "--redis-password",
            PASSWORD,
            "--redis-timeout",
            "1s",
        ],
    );
    let mut client = connect(sluice.grpc_addr).await;
    let codes: Vec<i32> = {
        let mut codes = Vec::new();
        for _ in 0..3 {
            codes.push(
                call(&mut client, one_descriptor("unix", &[("k", "v")]))
                    .await
                    .overall_code,
            );
        }
        codes
    };
    assert_eq!(codes, [OK, OK, OVER]);
    assert_eq!(redis.cli(&["DBSIZE"]).trim(), "1");
    assert!(!sluice.log().contains(PASSWORD));
}
