//! Envoy Gateway's certificates, made as its certgen makes them: one self-signed RSA-2048 CA
//! (CN `envoy-gateway`, key usages keyEncipherment, digitalSignature, certSign), and leaf
//! certificates with no ExtendedKeyUsage, keys written as PKCS#1 ("RSA PRIVATE KEY"): the
//! control plane's (SANs `envoy-gateway`, `envoy-gateway.<ns>`, `….svc`, `….svc.cluster.local`)
//! and the `*` one (SAN `*.<ns>`) that Envoy and the rate-limit Deployment mount as `/certs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_RSA_SHA256,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

/// Envoy Gateway's namespace.
pub const NAMESPACE: &str = "envoy-gateway-system";
/// The control plane's service name, a single DNS label: the name sluice checks.
pub const GATEWAY_NAME: &str = "envoy-gateway";

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/envoy-gateway")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One certificate and its key in both encodings.
pub struct Leaf {
    pub cert: String,
    /// PKCS#1, as Envoy Gateway writes keys.
    pub key_pkcs1: String,
}

/// The CA, the control plane's certificate, and the `/certs` directory of the rate-limit pod
/// (holding the `*` certificate).
pub struct EgCerts {
    pub ca: String,
    pub gateway: Leaf,
    certs: tempfile::TempDir,
}

impl EgCerts {
    /// Makes the certificates and writes `tls.crt`, `tls.key` and `ca.crt` into a directory
    /// standing for the `envoy-rate-limit` Secret mounted at `/certs`.
    pub fn new() -> Self {
        let ca_key = rsa_key("ca");
        let mut ca_params = CertificateParams::new(Vec::new()).expect("params");
        ca_params
            .distinguished_name
            .push(DnType::CommonName, GATEWAY_NAME);
        // certgen also puts the serial number into the subject (OID 2.5.4.5).
        ca_params
            .distinguished_name
            .push(DnType::CustomDnType(vec![2, 5, 4, 5]), "1234");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyCertSign,
        ];
        let ca = ca_params.self_signed(&ca_key).expect("CA").pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let gateway_names = [
            GATEWAY_NAME.to_string(),
            format!("{GATEWAY_NAME}.{NAMESPACE}"),
            format!("{GATEWAY_NAME}.{NAMESPACE}.svc"),
            format!("{GATEWAY_NAME}.{NAMESPACE}.svc.cluster.local"),
        ];
        let gateway = leaf("envoy-gateway", GATEWAY_NAME, &gateway_names, &issuer);
        let envoy = leaf("envoy", "*", &[format!("*.{NAMESPACE}")], &issuer);
        let certs = tempfile::tempdir().expect("temp dir");
        std::fs::write(certs.path().join("tls.crt"), &envoy.cert).unwrap();
        std::fs::write(certs.path().join("tls.key"), &envoy.key_pkcs1).unwrap();
        std::fs::write(certs.path().join("ca.crt"), &ca).unwrap();
        Self { ca, gateway, certs }
    }

    /// A file of the `/certs` directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.certs.path().join(name)
    }

    /// The control plane's TLS as Envoy Gateway serves xDS: TLS 1.3 only, ALPN h2, a client
    /// certificate signed by the CA required (no name checked).
    pub fn control_plane_tls(&self) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = RootCertStore::empty();
        roots.add(der(&self.ca)).expect("CA");
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .expect("verifier");
        let key = PrivateKeyDer::from_pem_slice(self.gateway.key_pkcs1.as_bytes()).expect("key");
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![der(&self.gateway.cert)], key)
            .expect("server certificate");
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    }
}

fn rsa_key(name: &str) -> KeyPair {
    KeyPair::from_pem_and_sign_algo(&fixture(&format!("{name}.pkcs8.pem")), &PKCS_RSA_SHA256)
        .expect("RSA key")
}

fn leaf(key: &str, common_name: &str, names: &[String], issuer: &Issuer<'_, KeyPair>) -> Leaf {
    let mut params = CertificateParams::new(names.to_vec()).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::DataEncipherment,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::ContentCommitment,
    ];
    // No extended key usage at all, as certgen makes them.
    params.extended_key_usages = Vec::new();
    let cert = params.signed_by(&rsa_key(key), issuer).expect("leaf").pem();
    let key_pkcs1 = fixture(&format!("{key}.pkcs1.pem"));
    assert!(key_pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
    Leaf { cert, key_pkcs1 }
}

fn der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).expect("certificate")
}
