//! Test certificates: CAs that issue server and client certificates (rcgen), and certificate
//! files replaced atomically.

use std::path::PathBuf;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use sluice::app::TlsSettings;
use tempfile::TempDir;

/// A certificate authority that issues server and client certificates.
pub struct Ca {
    pub pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A PEM certificate and its PEM key.
pub struct Pair {
    pub cert: String,
    pub key: String,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("key");
        let pem = params.self_signed(&key).expect("ca cert").pem();
        Self {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    fn issue(&self, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Pair {
        let names = names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let mut params = CertificateParams::new(names).expect("params");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().expect("key");
        let cert = params.signed_by(&key, &self.issuer).expect("cert");
        Pair {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> Pair {
        self.issue(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        )
    }

    /// A client certificate.
    pub fn client(&self) -> Pair {
        self.client_named("client.test")
    }

    /// A client certificate whose subject alternative name is `name`.
    pub fn client_named(&self, name: &str) -> Pair {
        self.issue(&[name], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// Certificate files in a temporary directory.
pub struct Files {
    dir: TempDir,
}

impl Files {
    /// `server.crt`, `server.key` and, for mTLS, `client-ca.crt` in a new directory.
    pub fn new(server: &Pair, client_ca: Option<&Ca>) -> Self {
        let files = Self {
            dir: tempfile::tempdir().expect("temp dir"),
        };
        files.replace("server.crt", &server.cert);
        files.replace("server.key", &server.key);
        if let Some(ca) = client_ca {
            files.replace("client-ca.crt", &ca.pem);
        }
        files
    }

    /// The path of file `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The settings for these files, with the client CA when `mtls`.
    pub fn settings(&self, mtls: bool) -> TlsSettings {
        TlsSettings {
            cert: self.path("server.crt"),
            key: self.path("server.key"),
            client_ca: mtls.then(|| self.path("client-ca.crt")),
            client_san: None,
        }
    }

    /// Writes a temporary file and renames it over `name` (an atomic replace: readers never see a
    /// half-written file).
    pub fn replace(&self, name: &str, contents: &str) {
        let tmp = self.path(&format!(".{name}.tmp"));
        std::fs::write(&tmp, contents).expect("write");
        std::fs::rename(&tmp, self.path(name)).expect("rename");
    }
}
