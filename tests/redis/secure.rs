//! `rediss://` (TLS with a private CA via --redis-ca) and AUTH from the URL; TLS with client
//! certificates (`tls-auth-clients yes`), `--redis-tls` on a bare `host:port`, and hostname
//! checks that can be skipped while the chain is still verified; credentials never appear in
//! logs.

use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
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

/// A CA, a server certificate for the name `localhost` only (not 127.0.0.1) and a client
/// certificate, all written into a directory; and a second CA that signed nothing.
struct MutualTls {
    dir: tempfile::TempDir,
}

impl MutualTls {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        // Distinct names: OpenSSL (Redis checking the client) takes a certificate whose
        // subject equals its issuer for a self-signed one.
        let issue = |name: &str| {
            let mut ca = CertificateParams::new(Vec::new()).expect("params");
            ca.distinguished_name.push(DnType::CommonName, name);
            ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let key = KeyPair::generate().expect("key");
            std::fs::write(
                dir.path().join(name),
                ca.self_signed(&key).expect("ca").pem(),
            )
            .expect("write");
            Issuer::new(ca, key)
        };
        let ca = issue("ca.crt");
        issue("other-ca.crt");
        for (name, san) in [("server", "localhost"), ("client", "sluice-client")] {
            let mut params = CertificateParams::new(vec![san.to_owned()]).expect("params");
            params.distinguished_name.push(DnType::CommonName, name);
            let key = KeyPair::generate().expect("key");
            let cert = params.signed_by(&key, &ca).expect("cert");
            std::fs::write(dir.path().join(format!("{name}.crt")), cert.pem()).expect("write");
            std::fs::write(dir.path().join(format!("{name}.key")), key.serialize_pem())
                .expect("write");
        }
        Self { dir }
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    /// A TLS-only Redis that requires client certificates signed by the CA.
    fn redis(&self) -> RedisServer {
        let file = |name: &str| self.path(name).display().to_string();
        let (ca, cert, key) = (file("ca.crt"), file("client.crt"), file("client.key"));
        let server = [file("server.crt"), file("server.key")];
        RedisServer::start_full(
            |port, _| {
                let args = [
                    "--port",
                    "0",
                    "--tls-port",
                    &port.to_string(),
                    "--tls-cert-file",
                    &server[0],
                    "--tls-key-file",
                    &server[1],
                    "--tls-ca-cert-file",
                    &ca,
                    "--tls-auth-clients",
                    "yes",
                ];
                args.iter().map(|a| (*a).to_owned()).collect()
            },
            &["--tls", "--cacert", &ca, "--cert", &cert, "--key", &key],
        )
    }
}

/// Client certificates: with the right CA, certificate and name the store counts; without
/// the certificate, with the wrong CA, or by IP without skipping the name check it cannot;
/// `--redis-tls` makes a bare `host:port` TLS; skipping the name still checks the chain.
#[tokio::test]
#[ignore = "needs redis-server (scripts/test installs it)"]
async fn client_certificates_and_hostname_checks() {
    let certs = MutualTls::new();
    let redis = certs.redis();
    let c = charge();
    let now = 1_767_225_600 * SECOND;
    let settings = |url: String| RedisSettings {
        clock: RedisClock::Caller,
        timeout: Duration::from_secs(2),
        ca: Some(certs.path("ca.crt")),
        client_cert: Some(certs.path("client.crt")),
        client_key: Some(certs.path("client.key")),
        ..RedisSettings::new(url)
    };
    let answers = async |settings: RedisSettings| {
        let store = RedisStore::connect(settings).await.expect("store starts");
        store.apply(std::slice::from_ref(&c), now).await.is_ok()
    };
    let by_name = settings(format!("rediss://localhost:{}", redis.port));
    assert!(
        answers(by_name.clone()).await,
        "CA, client certificate, name"
    );
    let bare_tls = RedisSettings {
        tls: true,
        tls_skip_hostname_verification: true,
        ..settings(format!("127.0.0.1:{}", redis.port))
    };
    assert!(
        answers(bare_tls.clone()).await,
        "--redis-tls, by IP, name not checked"
    );
    assert_eq!(redis.cli(&["DBSIZE"]).trim(), "1");
    let no_client_cert = RedisSettings {
        client_cert: None,
        client_key: None,
        ..by_name.clone()
    };
    assert!(
        !answers(no_client_cert).await,
        "redis requires a client certificate"
    );
    let by_ip = settings(format!("rediss://127.0.0.1:{}", redis.port));
    assert!(
        !answers(by_ip).await,
        "the certificate names localhost, not 127.0.0.1"
    );
    let other_ca = RedisSettings {
        ca: Some(certs.path("other-ca.crt")),
        ..bare_tls
    };
    assert!(
        !answers(other_ca).await,
        "skipping the name still checks the chain"
    );
}

/// TLS files without TLS, a client certificate without its key, TLS on a unix socket and a
/// file that holds no certificate are refused at start, with the flag named.
#[tokio::test]
async fn tls_settings_that_cannot_work_are_refused() {
    let certs = MutualTls::new();
    let refused = |settings: RedisSettings| match RedisStore::new(settings) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    };
    let plain = RedisSettings {
        ca: Some(certs.path("ca.crt")),
        ..RedisSettings::new("redis://127.0.0.1:1")
    };
    assert!(refused(plain).contains("need TLS"));
    let half = RedisSettings {
        client_cert: Some(certs.path("client.crt")),
        ..RedisSettings::new("rediss://127.0.0.1:1")
    };
    assert!(refused(half).contains("go together"));
    let unix = RedisSettings {
        tls: true,
        ..RedisSettings::new("/run/redis.sock")
    };
    assert!(refused(unix).contains("unix socket"));
    let not_pem = RedisSettings {
        ca: Some(certs.path("client.key")),
        ..RedisSettings::new("rediss://127.0.0.1:1")
    };
    let said = refused(not_pem);
    assert!(
        said.contains("--redis-ca") && said.contains("no PEM certificate"),
        "{said}"
    );
    let missing = RedisSettings {
        client_cert: Some(certs.path("client.crt")),
        client_key: Some(certs.path("nowhere.key")),
        ..RedisSettings::new("rediss://127.0.0.1:1")
    };
    assert!(refused(missing).contains("cannot read --redis-client-key"));
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
