//! Which certificate authorities https and wss connections trust: the public roots
//! (webpki-roots, built in) and any the caller adds, e.g. a private CA of an on-premises
//! service. rustls with the ring provider.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::ClientError;

/// Trusted roots. Cheap to clone; the default (public roots only) is shared.
#[derive(Clone, Debug, Default)]
pub struct TlsRoots {
    /// `None`: the public roots only.
    extra: Option<Arc<Extra>>,
}

#[derive(Debug)]
struct Extra {
    certificates: Vec<CertificateDer<'static>>,
    config: Arc<ClientConfig>,
}

impl TlsRoots {
    /// The public roots and every certificate in `pem` (one or more CERTIFICATE blocks).
    pub fn with_pem(pem: &[u8]) -> Result<TlsRoots, ClientError> {
        let certificates = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ClientError::Protocol(format!("trusted roots: {e}")))?;
        if certificates.is_empty() {
            return Err(ClientError::Protocol(
                "trusted roots: no CERTIFICATE block in the PEM text".into(),
            ));
        }
        let config = client_config(&certificates)?;
        Ok(TlsRoots {
            extra: Some(Arc::new(Extra {
                certificates,
                config,
            })),
        })
    }

    /// [`TlsRoots::with_pem`] from a file.
    pub fn with_pem_file(path: impl AsRef<Path>) -> Result<TlsRoots, ClientError> {
        let path = path.as_ref();
        let pem = std::fs::read(path)
            .map_err(|e| ClientError::Protocol(format!("{}: {e}", path.display())))?;
        TlsRoots::with_pem(&pem)
    }

    /// The rustls settings for a wss connection.
    pub(crate) fn rustls(&self) -> Arc<ClientConfig> {
        match &self.extra {
            Some(extra) => extra.config.clone(),
            None => {
                static PUBLIC: OnceLock<Arc<ClientConfig>> = OnceLock::new();
                PUBLIC
                    .get_or_init(|| client_config(&[]).expect("the public roots load"))
                    .clone()
            }
        }
    }

    /// `builder` trusting these roots too.
    pub fn apply(&self, mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        for certificate in self.extra.iter().flat_map(|e| &e.certificates) {
            if let Ok(certificate) = reqwest::Certificate::from_der(certificate) {
                builder = builder.add_root_certificate(certificate);
            }
        }
        builder
    }
}

fn client_config(extra: &[CertificateDer<'static>]) -> Result<Arc<ClientConfig>, ClientError> {
    let mut roots = RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for certificate in extra {
        roots
            .add(certificate.clone())
            .map_err(|e| ClientError::Protocol(format!("trusted roots: {e}")))?;
    }
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
    Ok(Arc::new(config))
}
