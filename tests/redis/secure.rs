//! `rediss://` (TLS with a private CA via --redis-ca) and AUTH from the URL; credentials never
//! appear in logs.

use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use sluice::algorithm::Algorithm;
use sluice::clock::SECOND;
use sluice::store::redis::RedisClock;
use sluice::store::{Charge, Gate, RedisSettings, RedisStore, Store};

use crate::common::process::Sluice;
use crate::common::redis::RedisServer;
use crate::common::{self, limit};

/// A CA and a server certificate for 127.0.0.1, written into `dir` as ca.crt, server.crt/key.
fn write_certs(dir: &std::path::Path) {
    let mut ca = CertificateParams::new(Vec::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().expect("key");
    let ca_pem = ca.self_signed(&ca_key).expect("ca").pem();
    let issuer = Issuer::new(ca, ca_key);
    let server = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    let key = KeyPair::generate().expect("key");
    let cert = server.signed_by(&key, &issuer).expect("cert");
    std::fs::write(dir.join("ca.crt"), ca_pem).expect("write");
    std::fs::write(dir.join("server.crt"), cert.pem()).expect("write");
    std::fs::write(dir.join("server.key"), key.serialize_pem()).expect("write");
}

fn charge() -> Charge {
    let limit = limit(Algorithm::SlidingLog, 2, 60 * SECOND);
    common::charge("secure", ("k", "v"), limit, 1, Gate::Enforced)
}

/// TLS only (no plaintext port) and an ACL user: sluice connects with the URL's user and
/// password, trusting the CA given by --redis-ca; a wrong password fails the calls.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn tls_and_acl_user_from_the_url() {
    let redis = RedisServer::start_full(
        |port, dir| {
            write_certs(dir);
            let file = |name: &str| dir.join(name).display().to_string();
            vec![
                "--port".into(),
                "0".into(),
                "--tls-port".into(),
                port.to_string(),
                "--tls-cert-file".into(),
                file("server.crt"),
                "--tls-key-file".into(),
                file("server.key"),
                "--tls-ca-cert-file".into(),
                file("ca.crt"),
                "--tls-auth-clients".into(),
                "no".into(),
                "--user".into(),
                "app".into(),
                "on".into(),
                ">s3cret".into(),
                "~*".into(),
                "+@all".into(),
                "--user".into(),
                "default".into(),
                "off".into(),
            ]
        },
        &[
            "--tls",
            "--insecure",
            "--user",
            "app",
            "--pass",
            "s3cret",
            "--no-auth-warning",
        ],
    );
    let ca = redis.dir().join("ca.crt");
    let connect = |password: &str| {
        let settings = RedisSettings {
            clock: RedisClock::Caller,
            timeout: Duration::from_secs(2),
            ca: Some(ca.clone()),
            ..RedisSettings::new(format!("rediss://app:{password}@127.0.0.1:{}", redis.port))
        };
        RedisStore::connect(settings)
    };
    let store: Arc<dyn Store> = Arc::new(connect("s3cret").await.expect("store"));
    let c = charge();
    let now = 1_767_225_600 * SECOND;
    for left in [1, 0] {
        let o = store
            .apply(std::slice::from_ref(&c), now)
            .await
            .expect("over TLS");
        assert_eq!(
            (o[0].verdict.admitted, o[0].verdict.remaining),
            (true, left)
        );
    }
    assert_eq!(redis.cli(&["DBSIZE"]).trim(), "1");
    let wrong = connect("nope").await.expect("store starts anyway");
    assert!(wrong.apply(std::slice::from_ref(&c), now).await.is_err());
}

/// The password of --redis-url never reaches the logs, even when Redis is unreachable.
#[test]
fn credentials_stay_out_of_logs() {
    let port = crate::common::redis::free_port();
    let url = format!("redis://app:hunter2@127.0.0.1:{port}");
    let rules = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1 }\n";
    let mut sluice = Sluice::start(rules, &["--store", "redis", "--redis-url", &url]);
    let log = sluice.log();
    sluice.stop();
    assert!(log.contains("***@127.0.0.1"), "{log}");
    assert!(!log.contains("hunter2"), "{log}");
}
