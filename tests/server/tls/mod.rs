//! TLS and mTLS on gRPC over real sockets: certificates made with rcgen, a tonic client on rustls,
//! certificate reloads (rename over, Kubernetes symlink swap, broken files), and start-up errors.

use crate::common;

mod certs;
mod reload;
mod startup;

use std::time::Duration;

use certs::{Ca, Files, Pair};
use common::*;
use sluice::app::TlsSettings;
use sluice::proto::RateLimitResponse;
use sluice::proto::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

const RULES: &str = "domain: test\ndescriptors:\n  - key: k\n    rate_limit: { unit: minute, requests_per_unit: 1000 }\n";

/// How long a reload may take to show.
const DEADLINE: Duration = Duration::from_secs(10);

/// A client that trusts `ca` for `localhost`, optionally presenting `identity`.
fn tls_client(ca: &Ca, identity: Option<&Pair>) -> ClientTlsConfig {
    let config = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&ca.pem))
        .domain_name("localhost");
    match identity {
        Some(pair) => config.identity(Identity::from_pem(&pair.cert, &pair.key)),
        None => config,
    }
}

/// Opens a new connection (TLS when `tls` is set) and makes one ShouldRateLimit call.
async fn call_once(server: &TestServer, tls: Option<ClientTlsConfig>) -> Result<(), String> {
    let attempt = async {
        let endpoint = match tls {
            Some(tls) => Endpoint::from_shared(format!("https://{}", server.grpc_addr))
                .and_then(|e| e.tls_config(tls)),
            None => Endpoint::from_shared(format!("http://{}", server.grpc_addr)),
        }
        .map_err(|e| format!("endpoint: {e}"))?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("connect: {e:?}"))?;
        let response = RateLimitServiceClient::new(channel)
            .should_rate_limit(one_descriptor("test", &[("k", "v")]))
            .await
            .map_err(|e| format!("call: {e}"))?;
        check_ok(&response.into_inner())
    };
    tokio::time::timeout(Duration::from_secs(5), attempt)
        .await
        .map_err(|_| "timed out".to_string())?
}

fn check_ok(response: &RateLimitResponse) -> Result<(), String> {
    match response.overall_code {
        OK => Ok(()),
        code => Err(format!("overall code {code}")),
    }
}

/// A TLS server with a certificate from `ca`; with `client_ca`, mTLS against it too. Keep the
/// files as long as the server.
async fn tls_server(ca: &Ca, client_ca: Option<&Ca>) -> (Files, TestServer) {
    let files = Files::new(&ca.server(), client_ca);
    let server = TestServer::start_tls(RULES, files.settings(client_ca.is_some())).await;
    (files, server)
}

/// One call on a new connection that trusts `ca` and presents `identity`.
async fn call_tls(server: &TestServer, ca: &Ca, identity: Option<&Pair>) -> Result<(), String> {
    call_once(server, Some(tls_client(ca, identity))).await
}

/// A client trusting the server's CA gets an answer over TLS.
#[tokio::test]
async fn tls_call_succeeds() {
    let ca = Ca::new("ca");
    let (_files, server) = tls_server(&ca, None).await;
    call_tls(&server, &ca, None).await.expect("TLS call");
    server.stop().await;
}

/// A plaintext client cannot talk to a TLS server.
#[tokio::test]
async fn plaintext_client_is_refused() {
    let ca = Ca::new("ca");
    let (_files, server) = tls_server(&ca, None).await;
    assert!(call_once(&server, None).await.is_err());
    // The failed handshake did not stop the server.
    call_tls(&server, &ca, None)
        .await
        .expect("TLS call after a bad client");
    server.stop().await;
}

/// A client that connects and never completes its handshake does not hold up other clients.
#[tokio::test]
async fn stalled_handshake_does_not_block_others() {
    let ca = Ca::new("ca");
    let (_files, server) = tls_server(&ca, None).await;
    let _silent = tokio::net::TcpStream::connect(server.grpc_addr)
        .await
        .expect("tcp connect");
    call_tls(&server, &ca, None)
        .await
        .expect("TLS call while another handshake is pending");
    server.stop().await;
}

/// A client that does not trust the server's CA refuses the connection.
#[tokio::test]
async fn client_refuses_unknown_server_ca() {
    let ca = Ca::new("ca");
    let (_files, server) = tls_server(&ca, None).await;
    let error = call_tls(&server, &Ca::new("stranger"), None)
        .await
        .expect_err("refused");
    assert!(error.contains("UnknownIssuer"), "{error}");
    server.stop().await;
}

/// With a client CA, a client without a certificate is refused.
#[tokio::test]
async fn mtls_refuses_client_without_certificate() {
    let (ca, client_ca) = (Ca::new("ca"), Ca::new("client-ca"));
    let (_files, server) = tls_server(&ca, Some(&client_ca)).await;
    let error = call_tls(&server, &ca, None).await.expect_err("refused");
    assert!(error.contains("CertificateRequired"), "{error}");
    server.stop().await;
}

/// With a client CA, a client certificate issued by another CA is refused.
#[tokio::test]
async fn mtls_refuses_certificate_from_another_ca() {
    let (ca, client_ca) = (Ca::new("ca"), Ca::new("client-ca"));
    let (_files, server) = tls_server(&ca, Some(&client_ca)).await;
    let intruder = Ca::new("intruder").client();
    let error = call_tls(&server, &ca, Some(&intruder))
        .await
        .expect_err("refused");
    assert!(error.contains("UnknownCA"), "{error}");
    server.stop().await;
}

/// With a client CA, a client certificate issued by it is accepted.
#[tokio::test]
async fn mtls_accepts_certificate_from_client_ca() {
    let (ca, client_ca) = (Ca::new("ca"), Ca::new("client-ca"));
    let (_files, server) = tls_server(&ca, Some(&client_ca)).await;
    let client = client_ca.client();
    call_tls(&server, &ca, Some(&client))
        .await
        .expect("mTLS call");
    server.stop().await;
}

/// With a required client name (`--tls-client-san`, envoyproxy/ratelimit GRPC_CLIENT_TLS_SAN), a
/// client certificate from the client CA is accepted only if it is valid for that name: its own
/// name, or a wildcard covering it, as Go's x509 verification accepts.
#[tokio::test]
async fn mtls_requires_the_client_name() {
    let (ca, client_ca) = (Ca::new("ca"), Ca::new("client-ca"));
    let files = Files::new(&ca.server(), Some(&client_ca));
    let settings = TlsSettings {
        client_san: Some("envoy.mesh.test".into()),
        ..files.settings(true)
    };
    let server = TestServer::start_tls(RULES, settings).await;
    let other = client_ca.client_named("other.mesh.test");
    let error = call_tls(&server, &ca, Some(&other))
        .await
        .expect_err("wrong name refused");
    assert!(
        error.contains("BadCertificate") || error.contains("NotValidForName"),
        "{error}"
    );
    for name in ["envoy.mesh.test", "*.mesh.test"] {
        let client = client_ca.client_named(name);
        call_tls(&server, &ca, Some(&client))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    server.stop().await;
}
