//! Certificate files to a rustls `ServerConfig`: read the PEM bytes, then build (ring provider,
//! ALPN `h2`, client certificates required when a client CA is set).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::{TlsError, TlsSettings};
use crate::files::MAX_PEM_BYTES;

/// The raw contents of the certificate files, compared to tell whether a reload changes anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sources {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl Sources {
    /// Reads every file (the only I/O here).
    pub(super) fn read(settings: &TlsSettings) -> Result<Self, TlsError> {
        Ok(Self {
            cert: read(&settings.cert)?,
            key: read(&settings.key)?,
            client_ca: settings.client_ca.as_deref().map(read).transpose()?,
        })
    }

    /// Parses and checks the files into a server configuration.
    pub(super) fn build(&self, settings: &TlsSettings) -> Result<ServerConfig, TlsError> {
        // Explicit provider: never depend on a process-wide default that another crate could set.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = certificates(&self.cert, &settings.cert)?;
        let key = private_key(&self.key, &settings.key)?;
        let pair_error = |source| TlsError::Pair {
            cert: settings.cert.clone(),
            key: settings.key.clone(),
            source,
        };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(pair_error)?;
        let builder = match (&self.client_ca, &settings.client_ca) {
            (Some(pem), Some(path)) => {
                let cas = certificates(pem, path)?;
                let verifier = client_verifier(cas, provider, settings.client_san.as_deref())
                    .map_err(|source| TlsError::ClientCa {
                        path: path.clone(),
                        source,
                    })?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        // `with_single_cert` also checks that the key belongs to the leaf certificate.
        let mut config = builder.with_single_cert(chain, key).map_err(pair_error)?;
        // gRPC is HTTP/2 only; clients that offer ALPN must agree on h2.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// Reads a PEM file: a regular file (never blocking on a FIFO) of at most [`MAX_PEM_BYTES`].
fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::files::read(path, MAX_PEM_BYTES).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn certificates(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            path: path.to_path_buf(),
            source,
        })?;
    if chain.is_empty() {
        return Err(TlsError::Missing {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(chain)
}

fn private_key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|source| match source {
        pem::Error::NoItemsFound => TlsError::Missing {
            path: path.to_path_buf(),
            what: "private key",
        },
        source => TlsError::Pem {
            path: path.to_path_buf(),
            source,
        },
    })
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn client_verifier(
    cas: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
    name: Option<&str>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, BoxError> {
    let mut roots = RootCertStore::empty();
    for ca in cas {
        roots.add(ca)?;
    }
    // Without `allow_unauthenticated`, a client without a certificate is refused.
    let verifier =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
    Ok(match name {
        Some(name) => Arc::new(super::san::RequireName::new(verifier, name)?),
        None => verifier,
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use rcgen::{CertificateParams, KeyPair};

    use super::*;

    fn settings(client_ca: bool) -> TlsSettings {
        TlsSettings {
            cert: PathBuf::from("/certs/tls.crt"),
            key: PathBuf::from("/certs/tls.key"),
            client_ca: client_ca.then(|| PathBuf::from("/certs/ca.crt")),
            client_san: None,
        }
    }

    fn self_signed() -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["localhost".into()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        (cert.pem(), key.serialize_pem())
    }

    fn sources(cert: &str, key: &str, client_ca: Option<&str>) -> Sources {
        Sources {
            cert: cert.into(),
            key: key.into(),
            client_ca: client_ca.map(Into::into),
        }
    }

    /// A matching pair builds a config that offers only h2.
    #[test]
    fn valid_pair_offers_h2() {
        let (cert, key) = self_signed();
        let config = sources(&cert, &key, None)
            .build(&settings(false))
            .expect("builds");
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    /// A client CA file of certificates builds a verifier; a PEM block that is no certificate
    /// does not (mTLS behaviour itself is tested over sockets in tests/server/tls/).
    #[test]
    fn client_ca_must_hold_certificates() {
        let (cert, key) = self_signed();
        let (ca, _) = self_signed();
        sources(&cert, &key, Some(&ca))
            .build(&settings(true))
            .expect("builds");
        let not_a_cert = "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
        let e = sources(&cert, &key, Some(not_a_cert))
            .build(&settings(true))
            .expect_err("bad ca");
        assert!(matches!(e, TlsError::ClientCa { .. }), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("/certs/ca.crt: unusable client CA: "),
            "{e}"
        );
    }

    /// A key of another certificate is refused, naming both files.
    #[test]
    fn mismatched_key_is_an_error() {
        let (cert, _) = self_signed();
        let (_, other_key) = self_signed();
        let e = sources(&cert, &other_key, None)
            .build(&settings(false))
            .expect_err("mismatch");
        assert!(matches!(e, TlsError::Pair { .. }), "{e:?}");
        let text = e.to_string();
        assert!(
            text.contains("/certs/tls.crt") && text.contains("/certs/tls.key"),
            "{text}"
        );
    }

    /// Files without the expected PEM sections say what is missing and where.
    #[test]
    fn missing_sections_name_the_file() {
        let (cert, key) = self_signed();
        let e = sources("not pem", &key, None)
            .build(&settings(false))
            .expect_err("no cert");
        assert_eq!(
            e.to_string(),
            "/certs/tls.crt: no certificate found (expected a PEM file)"
        );
        // The certificate file given as the key: no private key in it.
        let e = sources(&cert, &cert, None)
            .build(&settings(false))
            .expect_err("no key");
        assert_eq!(
            e.to_string(),
            "/certs/tls.key: no private key found (expected a PEM file)"
        );
        let e = sources(&cert, &key, Some("garbage"))
            .build(&settings(true))
            .expect_err("no ca");
        assert_eq!(
            e.to_string(),
            "/certs/ca.crt: no certificate found (expected a PEM file)"
        );
    }

    /// A PEM section with a broken body is a PEM error, not "missing".
    #[test]
    fn corrupt_pem_is_an_error() {
        let (_, key) = self_signed();
        let corrupt = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        let e = sources(corrupt, &key, None)
            .build(&settings(false))
            .expect_err("corrupt");
        assert!(matches!(e, TlsError::Pem { .. }), "{e:?}");
    }

    /// An unreadable file names its path.
    #[test]
    fn unreadable_file_names_the_path() {
        let e = Sources::read(&TlsSettings {
            cert: PathBuf::from("/nonexistent/tls.crt"),
            key: PathBuf::from("/nonexistent/tls.key"),
            client_ca: None,
            client_san: None,
        })
        .expect_err("missing");
        assert!(
            e.to_string()
                .starts_with("cannot read /nonexistent/tls.crt: "),
            "{e}"
        );
    }
}
