//! The channel to the control plane: its address, the client TLS (system roots plus a CA file,
//! an optional client certificate, an optional name override), TCP keepalive so a vanished
//! control plane is noticed, and the extra stream headers.

use std::path::Path;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic::codegen::http::uri::Authority;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::{XdsError, XdsSettings, XdsTls};

/// The longest wait for a TCP connection and TLS handshake.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TCP keepalive: idle time before the first probe, interval, probes. A control plane whose
/// host vanished (no FIN, no RST) is noticed within about a minute, and the stream re-opened;
/// HTTP/2 pings are not used, as gRPC servers refuse frequent pings by default.
const KEEPALIVE: (Duration, Duration, u32) = (Duration::from_secs(30), Duration::from_secs(10), 3);

/// Opens connections to the control plane.
#[derive(Debug)]
pub(super) struct Connector {
    uri: String,
    host: String,
    tls: Option<XdsTls>,
    headers: Vec<(AsciiMetadataKey, AsciiMetadataValue)>,
}

impl Connector {
    /// Checks the address, the headers and the TLS files.
    pub(super) fn new(settings: &XdsSettings) -> Result<Self, XdsError> {
        let server = &settings.server;
        let authority: Authority = server
            .parse()
            .map_err(|_| XdsError::Address(server.clone()))?;
        // Exactly host:port: no scheme, path or user.
        if authority.port().is_none() || authority.as_str() != server || server.contains('@') {
            return Err(XdsError::Address(server.clone()));
        }
        let host = authority.host().trim_matches(['[', ']']).to_string();
        let scheme = if settings.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let connector = Self {
            uri: format!("{scheme}://{server}"),
            host,
            tls: settings.tls.clone(),
            headers: settings
                .headers
                .iter()
                .map(|(name, value)| header(name, value))
                .collect::<Result<_, _>>()?,
        };
        connector.endpoint()?;
        Ok(connector)
    }

    /// The address, for logs.
    pub(super) fn uri(&self) -> &str {
        &self.uri
    }

    /// Connects (reading the TLS files again, so rotated certificates are used).
    pub(super) async fn connect(&self) -> Result<Channel, String> {
        let endpoint = self.endpoint().map_err(|e| e.to_string())?;
        endpoint.connect().await.map_err(|e| chain(&e))
    }

    /// Adds the extra stream headers to `metadata`.
    pub(super) fn add_headers(&self, metadata: &mut MetadataMap) {
        for (name, value) in &self.headers {
            metadata.append(name.clone(), value.clone());
        }
    }

    fn endpoint(&self) -> Result<Endpoint, XdsError> {
        let endpoint = Endpoint::from_shared(self.uri.clone())
            .map_err(|_| XdsError::Address(self.uri.clone()))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(Some(KEEPALIVE.0))
            .tcp_keepalive_interval(Some(KEEPALIVE.1))
            .tcp_keepalive_retries(Some(KEEPALIVE.2));
        let Some(tls) = &self.tls else {
            return Ok(endpoint);
        };
        let config = tls_config(tls, &self.host)?;
        // The system's roots when it has any (a minimal image may have none), plus the CA file.
        endpoint
            .clone()
            .tls_config(config.clone().with_native_roots())
            .or_else(|_| endpoint.tls_config(config))
            .map_err(|e| XdsError::Tls(chain(&e)))
    }
}

fn header(name: &str, value: &str) -> Result<(AsciiMetadataKey, AsciiMetadataValue), XdsError> {
    let invalid = || XdsError::Header(name.to_string());
    let key = AsciiMetadataKey::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
    let value = AsciiMetadataValue::try_from(value).map_err(|_| invalid())?;
    Ok((key, value))
}

/// The client TLS settings, after checking that every file holds what it should.
fn tls_config(tls: &XdsTls, host: &str) -> Result<ClientTlsConfig, XdsError> {
    let name = tls.server_name.as_deref().unwrap_or(host);
    let mut config = ClientTlsConfig::new().domain_name(name);
    if let Some(ca) = &tls.ca {
        let pem = read(ca)?;
        certificates(&pem, ca)?;
        config = config.ca_certificate(Certificate::from_pem(pem));
    }
    match (&tls.cert, &tls.key) {
        (Some(cert), Some(key)) => {
            let (cert_pem, key_pem) = (read(cert)?, read(key)?);
            certificates(&cert_pem, cert)?;
            PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
                XdsError::Tls(format!("{}: no usable private key: {e}", key.display()))
            })?;
            config = config.identity(Identity::from_pem(cert_pem, key_pem));
        }
        (None, None) => {}
        _ => {
            return Err(XdsError::Tls(
                "a client certificate needs its key, and a key its certificate".into(),
            ));
        }
    }
    Ok(config)
}

/// A certificate or key file: a regular file (never blocking on a FIFO) of at most
/// [`MAX_PEM_BYTES`](crate::files::MAX_PEM_BYTES), read as every other file is.
fn read(path: &Path) -> Result<Vec<u8>, XdsError> {
    crate::files::read(path, crate::files::MAX_PEM_BYTES)
        .map_err(|e| XdsError::Tls(format!("cannot read {}: {e}", path.display())))
}

fn certificates(pem: &[u8], path: &Path) -> Result<(), XdsError> {
    let found = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| XdsError::Tls(format!("{}: invalid PEM: {e}", path.display())))?;
    if found.is_empty() {
        return Err(XdsError::Tls(format!(
            "{}: no certificate found (expected a PEM file)",
            path.display()
        )));
    }
    Ok(())
}

/// An error and its causes on one line: tonic's transport errors say little at the top.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(server: &str) -> XdsSettings {
        XdsSettings::new(server)
    }

    /// Only a bare `host:port` is an address; the host (without brackets) is the TLS name.
    #[test]
    fn addresses() {
        for good in ["envoy-gateway:18001", "127.0.0.1:1", "[::1]:18001"] {
            Connector::new(&settings(good)).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        let v6 = Connector::new(&settings("[::1]:18001")).unwrap();
        assert_eq!((v6.host.as_str(), v6.uri()), ("::1", "http://[::1]:18001"));
        for bad in ["envoy-gateway", "http://h:1", "h:1/path", "", "user@h:1"] {
            let error = Connector::new(&settings(bad)).expect_err(bad).to_string();
            assert_eq!(error, format!("xDS server '{bad}' is not HOST:PORT"));
        }
    }

    /// Header names and values must be valid text metadata.
    #[test]
    fn headers() {
        let mut good = settings("h:1");
        good.headers = vec![("Authorization".into(), "Bearer x".into())];
        let connector = Connector::new(&good).expect("valid");
        let mut metadata = MetadataMap::new();
        connector.add_headers(&mut metadata);
        assert_eq!(metadata.get("authorization").unwrap(), "Bearer x");
        for (name, value) in [("bad name", "v"), ("x", "line\nbreak"), ("x-bin", "v")] {
            let mut bad = settings("h:1");
            bad.headers = vec![(name.into(), value.into())];
            let error = Connector::new(&bad).expect_err(name).to_string();
            assert!(error.contains(&format!("'{name}'")), "{error}");
        }
    }

    /// TLS files are checked at once: a missing file, a file without certificates, and a
    /// certificate without its key are clear errors.
    #[test]
    fn tls_files_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let not_pem = dir.path().join("ca.crt");
        std::fs::write(&not_pem, "hello").unwrap();
        let cases = [
            (
                XdsTls {
                    ca: Some(dir.path().join("missing.crt")),
                    ..XdsTls::default()
                },
                "cannot read",
            ),
            (
                XdsTls {
                    ca: Some(not_pem.clone()),
                    ..XdsTls::default()
                },
                "no certificate found",
            ),
            (
                XdsTls {
                    cert: Some(not_pem),
                    ..XdsTls::default()
                },
                "needs its key",
            ),
        ];
        for (tls, says) in cases {
            let mut s = settings("h:1");
            s.tls = Some(tls);
            let error = Connector::new(&s).expect_err(says).to_string();
            assert!(
                error.starts_with("xDS TLS: ") && error.contains(says),
                "{error}"
            );
        }
        let mut plain_tls = settings("envoy-gateway:18001");
        plain_tls.tls = Some(XdsTls::default());
        let connector = Connector::new(&plain_tls).expect("system roots only");
        assert_eq!(connector.uri(), "https://envoy-gateway:18001");
    }
}
