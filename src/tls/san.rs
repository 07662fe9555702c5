//! A client certificate verifier that also requires a name (`--tls-client-san`,
//! envoyproxy/ratelimit `GRPC_CLIENT_TLS_SAN`): the chain is verified as usual, then the client's
//! certificate must be valid for the name, as Go's `x509.Certificate.Verify` with `DNSName` checks
//! it (a DNS or IP subject alternative name; wildcard certificates match as for servers).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

/// The usual verifier, plus the name check.
#[derive(Debug)]
pub(super) struct RequireName {
    inner: Arc<dyn ClientCertVerifier>,
    name: ServerName<'static>,
}

impl RequireName {
    /// Wraps `inner`; `name` must be a DNS name or an IP address.
    pub(super) fn new(
        inner: Arc<dyn ClientCertVerifier>,
        name: &str,
    ) -> Result<Self, rustls::pki_types::InvalidDnsNameError> {
        Ok(Self {
            inner,
            name: ServerName::try_from(name.to_string())?,
        })
    }
}

impl ClientCertVerifier for RequireName {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
        cert.verify_is_valid_for_subject_name(&self.name)
            .map_err(|_| Error::InvalidCertificate(CertificateError::NotValidForName))?;
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
