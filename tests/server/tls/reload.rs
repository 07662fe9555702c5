//! Certificate reloads: rename over, the Kubernetes `..data` swap, broken files, the client CA.

use super::*;
use sluice::app::TlsSettings;

/// Certificate and key renamed over the old ones: new connections get the new certificate, an
/// established connection keeps working.
#[tokio::test]
async fn replaced_certificate_applies_to_new_connections() {
    let (old, new) = (Ca::new("old"), Ca::new("new"));
    let (files, server) = tls_server(&old, None).await;
    let established = Endpoint::from_shared(format!("https://{}", server.grpc_addr))
        .and_then(|e| e.tls_config(tls_client(&old, None)))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut established = RateLimitServiceClient::new(established);

    let pair = new.server();
    files.replace("server.crt", &pair.cert);
    files.replace("server.key", &pair.key);
    eventually(
        DEADLINE,
        "the new CA is trusted and the old one is not",
        async || {
            call_tls(&server, &new, None).await.is_ok()
                && call_tls(&server, &old, None).await.is_err()
        },
    )
    .await;
    let response = established
        .should_rate_limit(one_descriptor("test", &[("k", "v")]))
        .await
        .expect("established connection still answers");
    check_ok(&response.into_inner()).expect("OK");
    server.stop().await;
}

/// The Kubernetes secret layout (files behind a `..data` symlink swapped atomically) reloads.
#[tokio::test]
async fn kubernetes_secret_swap_reloads() {
    let (old, new) = (Ca::new("old"), Ca::new("new"));
    let dir = tempfile::tempdir().expect("temp dir");
    let version = |name: &str, pair: &Pair| {
        let path = dir.path().join(name);
        std::fs::create_dir(&path).expect("mkdir");
        std::fs::write(path.join("tls.crt"), &pair.cert).expect("write");
        std::fs::write(path.join("tls.key"), &pair.key).expect("write");
    };
    let link = |target: &str, name: &str| {
        std::os::unix::fs::symlink(target, dir.path().join(name)).expect("symlink")
    };
    version("..v1", &old.server());
    link("..v1", "..data");
    link("..data/tls.crt", "tls.crt");
    link("..data/tls.key", "tls.key");
    let settings = TlsSettings {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
        client_ca: None,
        client_san: None,
    };
    let server = TestServer::start_tls(RULES, settings).await;
    call_tls(&server, &old, None)
        .await
        .expect("old certificate");

    version("..v2", &new.server());
    link("..v2", "..data_tmp");
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).expect("swap");
    std::fs::remove_dir_all(dir.path().join("..v1")).expect("remove old version");
    eventually(DEADLINE, "the swapped certificate is served", async || {
        call_tls(&server, &new, None).await.is_ok()
    })
    .await;
    server.stop().await;
}

/// A broken replacement keeps the old certificate serving and records the error; a later good
/// replacement is picked up.
#[tokio::test]
async fn broken_replacement_keeps_the_old_certificate() {
    let (old, new) = (Ca::new("old"), Ca::new("new"));
    let (files, server) = tls_server(&old, None).await;
    let tls = server.tls.clone().expect("TLS state");
    let mut status = tls.subscribe();

    files.replace("server.crt", "-----BEGIN CERTIFICATE-----\ngarbage\n");
    let failed = tokio::time::timeout(DEADLINE, status.wait_for(|s| s.failures >= 1))
        .await
        .expect("the reload is attempted")
        .expect("status")
        .clone();
    assert_eq!(failed.generation, 1);
    let error = failed.last_error.expect("error kept");
    assert!(error.contains("server.crt"), "{error}");
    call_tls(&server, &old, None)
        .await
        .expect("old certificate still served");

    let pair = new.server();
    files.replace("server.key", &pair.key);
    files.replace("server.crt", &pair.cert);
    eventually(DEADLINE, "the good replacement is served", async || {
        call_tls(&server, &new, None).await.is_ok()
    })
    .await;
    assert_eq!(tls.status().last_error, None);
    server.stop().await;
}

/// The client CA file is reloaded too: clients of the new CA get in, those of the old do not.
#[tokio::test]
async fn replaced_client_ca_applies_to_new_connections() {
    let (ca, old, new) = (
        Ca::new("ca"),
        Ca::new("old-clients"),
        Ca::new("new-clients"),
    );
    let (files, server) = tls_server(&ca, Some(&old)).await;
    let (old_client, new_client) = (old.client(), new.client());
    call_tls(&server, &ca, Some(&old_client))
        .await
        .expect("old client CA");

    files.replace("client-ca.crt", &new.pem);
    eventually(DEADLINE, "only clients of the new CA get in", async || {
        call_tls(&server, &ca, Some(&new_client)).await.is_ok()
            && call_tls(&server, &ca, Some(&old_client)).await.is_err()
    })
    .await;
    server.stop().await;
}
