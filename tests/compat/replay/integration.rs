//! §6.6: envoyproxy/ratelimit's Go integration sequence (`test/integration/integration_test.go`)
//! against the personality and a real Redis, in the variants envoyproxy/ratelimit runs that apply
//! to sluice: plain, with a local cache, with `CACHE_KEY_PREFIX`, with
//! `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, with `REDIS_AUTH`; then the reset, reload and
//! share-threshold steps.

use std::time::Duration;

use super::harness::{Entries, Replay, Seen, Tally, no_limit, ok, over, seen};
use crate::common::ratelimit::room_in_window;
use crate::common::redis::RedisServer;
use crate::common::{descriptor, eventually, request};

const BASIC: &str = "domain: basic
descriptors:
  - { key: key1, rate_limit: { unit: second, requests_per_unit: 50 } }
  - { key: one_per_minute, rate_limit: { unit: minute, requests_per_unit: 1 } }
";

const ANOTHER: &str = "domain: another
descriptors:
  - { key: key2, rate_limit: { unit: minute, requests_per_unit: 20 } }
  - { key: key3, rate_limit: { unit: hour, requests_per_unit: 10 } }
  - { key: key4, rate_limit: { unit: day, requests_per_unit: 20 } }
";

const SHARE: &str = "domain: share-threshold-test
descriptors:
  - { key: files, value: 'files/*', share_threshold: true, rate_limit: { unit: hour, requests_per_unit: 10 } }
  - { key: files_no_share, value: 'files_no_share/*', rate_limit: { unit: hour, requests_per_unit: 10 } }
";

const RELOAD: &str = "domain: reload
descriptors:
  - { key: key1, rate_limit: { unit: second, requests_per_unit: 50 } }
";

const PASSWORD: &str = "integration-secret";

/// A fresh random-looking value per run (envoyproxy/ratelimit's tests use random strings).
fn fresh(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{tag}{nanos}")
}

/// envoyproxy/ratelimit's step 1–4 against `replay`; `local_cache` and `stop_increment` are the
/// variant.
async fn sequence(tally: &mut Tally, replay: &mut Replay, local_cache: bool, stop_increment: bool) {
    unknown_domain_and_basic(tally, replay).await;
    one_minute_limit(tally, replay, local_cache).await;
    two_descriptors(tally, replay, stop_increment).await;
}

/// Steps 1 and 2: a domain with no rules, and one basic call with its hit counted.
async fn unknown_domain_and_basic(tally: &mut Tally, replay: &mut Replay) {
    let response = replay
        .call(request("foo", vec![descriptor(&[("hello", "world")])]))
        .await;
    tally.same("1 unknown domain", no_limit(), seen(&response, 0));

    let response = replay
        .call(request("basic", vec![descriptor(&[("key1", "foo")])]))
        .await;
    tally.same("2 basic key1", ok(50, "SECOND", 49), seen(&response, 0));
    let hits = replay.stat("total_hits", "basic", "key1", "").await;
    tally.same("2 total_hits", 1.0, hits);
}

/// Step 3: 25 calls against 20 a minute, their statistics, and (with the local cache) its hits.
async fn one_minute_limit(tally: &mut Tally, replay: &mut Replay, local_cache: bool) {
    room_in_window(60, 15);
    let value = fresh("r");
    for k in 1..=25u32 {
        let response = replay
            .call(request("another", vec![descriptor(&[("key2", &value)])]))
            .await;
        let upstream = if k <= 20 {
            ok(20, "MINUTE", 20 - k)
        } else {
            over(20, "MINUTE")
        };
        tally.same(&format!("3 key2 call {k}"), upstream, seen(&response, 0));
        let stats = (
            replay.stat("total_hits", "another", "key2", "").await,
            replay.stat("over_limit", "another", "key2", "").await,
        );
        let over_by = f64::from(k.saturating_sub(20));
        tally.same(&format!("3 key2 stats {k}"), (f64::from(k), over_by), stats);
    }
    if local_cache {
        let cached = replay
            .plain("sluice_local_cache_hits_total{backend=\"redis\"}")
            .await;
        let mut seen_cached = cached;
        eventually(Duration::from_secs(30), "cache hits reported", async || {
            seen_cached = replay
                .plain("sluice_local_cache_hits_total{backend=\"redis\"}")
                .await;
            seen_cached >= 4.0
        })
        .await;
        tally.differs(
            "3 over_limit_with_local_cache = 4",
            (
                "ratelimit_service_rate_limit_over_limit_with_local_cache",
                4.0,
            ),
            ("sluice_local_cache_hits_total", 4.0),
            ("sluice_local_cache_hits_total", seen_cached),
            "sluice_local_cache_hits_total",
        );
    }
}

/// Step 4: two descriptors in one call, the second refused from call 11 on.
async fn two_descriptors(tally: &mut Tally, replay: &mut Replay, stop_increment: bool) {
    room_in_window(60, 15);
    let value = fresh("s");
    for k in 1..=15u32 {
        let both = vec![
            descriptor(&[("key2", &value)]),
            descriptor(&[("key3", &value)]),
        ];
        let response = replay.call(request("another", both)).await;
        let first_upstream = match (stop_increment, k) {
            (true, 11..) => ok(20, "MINUTE", 10),
            _ => ok(20, "MINUTE", 20 - k),
        };
        let first = seen(&response, 0);
        let case = format!("4 key2 of key2+key3, call {k}");
        // From call 11 the call is refused: nothing is charged, and key2 reports what it would
        // hold had the call passed (20 - 11).
        let first_sluice = ok(20, "MINUTE", 20 - k.min(11));
        if first_upstream == first_sluice {
            tally.same(&case, first_upstream, first);
        } else {
            tally.differs(
                &case,
                first_upstream,
                first_sluice,
                first,
                "Statuses of a refused call",
            );
        }
        let second: Seen = if k <= 10 {
            ok(10, "HOUR", 10 - k)
        } else {
            over(10, "HOUR")
        };
        tally.same(&format!("4 key3 call {k}"), second, seen(&response, 1));
        let code = if k <= 10 { "OK" } else { "OVER_LIMIT" };
        tally.same(
            &format!("4 overall call {k}"),
            code,
            super::harness::overall(&response),
        );
    }
    let over_limit = replay.stat("over_limit", "another", "key2", "").await;
    tally.same("4 key2 over_limit stays 5", 5.0, over_limit);
}

/// Step 1–4 in each variant.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn integration_variants() {
    let files = [("basic.yaml", BASIC), ("another.yaml", ANOTHER)];
    let variants: [(&str, Entries, bool, bool); 4] = [
        (
            "§6.6 plain",
            &[("LOCAL_CACHE_SIZE_IN_BYTES", "0")],
            false,
            false,
        ),
        (
            "§6.6 local cache",
            &[("LOCAL_CACHE_SIZE_IN_BYTES", "1048576")],
            true,
            false,
        ),
        (
            "§6.6 prefix",
            &[("CACHE_KEY_PREFIX", "prefix:")],
            false,
            false,
        ),
        (
            "§6.6 stop increment",
            &[("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
            false,
            true,
        ),
    ];
    for (name, env, local_cache, stop_increment) in variants {
        let redis = RedisServer::start();
        let mut tally = Tally::new(name);
        let mut replay = Replay::start(&files, env, &format!("127.0.0.1:{}", redis.port)).await;
        sequence(&mut tally, &mut replay, local_cache, stop_increment).await;
        if name == "§6.6 prefix" {
            let keys = redis.cli(&["KEYS", "prefix:another_key2_*"]);
            tally.same("prefix: keys carry it", true, !keys.trim().is_empty());
        }
        tally.finish();
    }

    let redis = RedisServer::start_full(
        |_, _| vec!["--requirepass".into(), PASSWORD.into()],
        &["-a", PASSWORD, "--no-auth-warning"],
    );
    let mut tally = Tally::new("§6.6 auth");
    let env = [("REDIS_AUTH", PASSWORD)];
    let mut replay = Replay::start(&files, &env, &format!("127.0.0.1:{}", redis.port)).await;
    sequence(&mut tally, &mut replay, false, false).await;
    tally.finish();
}

/// Steps 5, 7 and 8: the reset shrinks, a rule file added and removed reloads, a shared
/// threshold is one counter while unshared values each have their own.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn reset_reload_share() {
    let redis = RedisServer::start();
    let mut tally = Tally::new("§6.6 reset, reload, share threshold");
    let files = [
        ("basic.yaml", BASIC),
        ("another.yaml", ANOTHER),
        ("share.yaml", SHARE),
    ];
    let mut replay = Replay::start(&files, &[], &format!("127.0.0.1:{}", redis.port)).await;

    reset_shrinks(&mut tally, &mut replay).await;
    reload_adds_and_removes(&mut tally, &mut replay).await;
    share_threshold(&mut tally, &mut replay).await;
    tally.finish();
}

/// Step 5: the reset a status reports shrinks as the window goes by.
async fn reset_shrinks(tally: &mut Tally, replay: &mut Replay) {
    room_in_window(86_400, 10);
    let reset = |r: &sluice::proto::RateLimitResponse| {
        r.statuses[0]
            .duration_until_reset
            .as_ref()
            .map_or(0, |d| d.seconds)
    };
    let call = || request("another", vec![descriptor(&[("key4", "durTest")])]);
    let first = reset(&replay.call(call()).await);
    // envoyproxy/ratelimit's test waits 2 s between the calls.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = reset(&replay.call(call()).await);
    tally.same("5 the reset shrinks", true, second < first);
}

/// Step 7: a rule file added, then removed, while the server runs.
async fn reload_adds_and_removes(tally: &mut Tally, replay: &mut Replay) {
    let block = || request("reload", vec![descriptor(&[("block", "foo")])]);
    let response = replay.call(block()).await;
    tally.same(
        "7 reload: unknown domain first",
        no_limit(),
        seen(&response, 0),
    );
    let loaded = replay.plain("ratelimit_service_config_load_success").await;
    replay.write_rules("reload.yaml", RELOAD);
    eventually(
        Duration::from_secs(30),
        "the added file loads",
        async || replay.plain("ratelimit_service_config_load_success").await > loaded,
    )
    .await;
    let response = replay
        .call(request("reload", vec![descriptor(&[("key1", "foo")])]))
        .await;
    tally.same(
        "7 reload: the new rule",
        ok(50, "SECOND", 49),
        seen(&response, 0),
    );
    let loaded = replay.plain("ratelimit_service_config_load_success").await;
    replay.remove_rules("reload.yaml");
    eventually(Duration::from_secs(30), "the removal loads", async || {
        replay.plain("ratelimit_service_config_load_success").await > loaded
    })
    .await;
    let response = replay.call(block()).await;
    tally.same("7 reload: removed again", no_limit(), seen(&response, 0));
}

/// Step 8: `share_threshold`: values matching one wildcard share a counter, others do not.
async fn share_threshold(tally: &mut Tally, replay: &mut Replay) {
    room_in_window(3600, 10);
    let domain = "share-threshold-test";
    for k in 1..=10u32 {
        let response = replay
            .call(request(
                domain,
                vec![descriptor(&[("files", "files/a.pdf")])],
            ))
            .await;
        tally.same(
            &format!("8 shared call {k}"),
            ok(10, "HOUR", 10 - k),
            seen(&response, 0),
        );
    }
    let response = replay
        .call(request(
            domain,
            vec![descriptor(&[("files", "files/b.csv")])],
        ))
        .await;
    tally.same(
        "8 another shared value is over",
        over(10, "HOUR"),
        seen(&response, 0),
    );
    for k in 1..=10u32 {
        let value = format!("files_no_share/{}", fresh(&k.to_string()));
        let response = replay
            .call(request(
                domain,
                vec![descriptor(&[("files_no_share", &value)])],
            ))
            .await;
        tally.same(
            &format!("8 unshared value {k}"),
            ok(10, "HOUR", 9),
            seen(&response, 0),
        );
    }
}

/// A CA, a Redis server certificate for `server_name`, and a client certificate, written into
/// `dir` (ca.crt, server.crt/key, client.crt/key).
fn write_tls_files(dir: &std::path::Path, server_name: &str) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    // Each certificate with a subject of its own: OpenSSL (Redis checking the client) takes a
    // certificate whose subject equals its issuer's for a self-signed one.
    let mut ca = CertificateParams::new(Vec::new()).expect("params");
    ca.distinguished_name.push(DnType::CommonName, "replay-ca");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("key");
    std::fs::write(
        dir.join("ca.crt"),
        ca.self_signed(&ca_key).expect("ca").pem(),
    )
    .unwrap();
    let issuer = Issuer::new(ca, ca_key);
    for (name, subject) in [("server", server_name), ("client", "ratelimit")] {
        let mut params = CertificateParams::new(vec![subject.to_owned()]).expect("params");
        params.distinguished_name.push(DnType::CommonName, name);
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &issuer).expect("cert");
        std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

/// A Redis on TLS only, its certificate for `server_name`, asking for client certificates
/// when `clients` is true, with a password; its certificates and keys in the directory returned.
fn tls_redis(server_name: &str, clients: bool) -> (RedisServer, tempfile::TempDir) {
    let files = tempfile::tempdir().unwrap();
    write_tls_files(files.path(), server_name);
    let file = |name: &str| files.path().join(name).display().to_string();
    let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
    let auth_clients = if clients { "yes" } else { "no" };
    let redis = RedisServer::start_full(
        |port, _| {
            let port = port.to_string();
            [
                "--port",
                "0",
                "--tls-port",
                &port,
                "--tls-cert-file",
                &file("server.crt"),
                "--tls-key-file",
                &file("server.key"),
                "--tls-ca-cert-file",
                &ca,
                "--tls-auth-clients",
                auth_clients,
                "--requirepass",
                PASSWORD,
            ]
            .map(String::from)
            .to_vec()
        },
        // (redis-cli only sets the test's Redis up: it does not check the chain)
        &[
            "--tls",
            "--insecure",
            "--cert",
            &cert,
            "--key",
            &key,
            "-a",
            PASSWORD,
            "--no-auth-warning",
        ],
    );
    (redis, files)
}

/// envoyproxy/ratelimit's TLS variants: REDIS_TLS with REDIS_TLS_CACERT and REDIS_AUTH; then with
/// client certificates (REDIS_TLS_CLIENT_CERT/KEY) to a Redis whose certificate names `localhost`
/// only, reached by address with REDIS_TLS_SKIP_HOSTNAME_VERIFICATION.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn integration_tls_variants() {
    let files = [("basic.yaml", BASIC), ("another.yaml", ANOTHER)];
    for (section, server_name, clients) in [
        ("§6.6 TLS", "127.0.0.1", false),
        ("§6.6 TLS with client certificates", "localhost", true),
    ] {
        let (redis, tls_files) = tls_redis(server_name, clients);
        let file = |name: &str| tls_files.path().join(name).display().to_string();
        let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
        let mut env = vec![
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_CACERT", ca.as_str()),
            ("REDIS_AUTH", PASSWORD),
        ];
        if clients {
            env.extend([
                ("REDIS_TLS_CLIENT_CERT", cert.as_str()),
                ("REDIS_TLS_CLIENT_KEY", key.as_str()),
                ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
            ]);
        }
        let mut tally = Tally::new(section);
        let address = format!("127.0.0.1:{}", redis.port);
        let mut replay = Replay::start(&files, &env, &address).await;
        sequence(&mut tally, &mut replay, false, false).await;
        tally.finish();
    }
}
