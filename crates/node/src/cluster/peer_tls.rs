//! How a node checks another node's certificate when it passes a request on over https
//! (`cluster.internal_url`): against `cluster.ca_file`, or, without it, against the
//! certificates of this node's own `tls.cert` (nodes of one cluster share a CA or a
//! certificate), followed through reloads. The name checked is the internal URL's host.
//! There is no way to skip the check: a failure refuses the connection and is logged.

use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_name, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};

use crate::config::ValidConfig;
use crate::tls::{provider, Certificates};

/// The client side of TLS to other nodes. No ALPN: the connector offers none for HTTP/1.1
/// only, and the listener then speaks HTTP/1.1 (a WebSocket tunnel is an h1 upgrade).
pub(crate) fn client_config(verifier: Arc<NodeVerifier>) -> ClientConfig {
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth()
}

/// Checks other nodes' certificates.
#[derive(Debug)]
pub(crate) struct NodeVerifier {
    provider: Arc<CryptoProvider>,
    trust: Trust,
}

#[derive(Debug)]
enum Trust {
    /// `cluster.ca_file` (or a verifier that refuses all when its roots are unusable).
    Bundle(Result<Arc<WebPkiServerVerifier>, String>),
    /// This node's own certificate file.
    Own(Own),
}

#[derive(Debug)]
struct Own {
    /// The listener's certificates once it serves, so a reload changes the trust too.
    live: OnceLock<Arc<Certificates>>,
    /// The certificate loaded at start, until then (`None`: this node has no TLS).
    at_start: Option<Arc<CertifiedKey>>,
    /// A verifier over the current certificate's chain, rebuilt when the certificate changes.
    cached: Mutex<Option<(Arc<CertifiedKey>, Arc<WebPkiServerVerifier>)>>,
}

impl NodeVerifier {
    pub(crate) fn new(config: &ValidConfig) -> Arc<NodeVerifier> {
        NodeVerifier::with(config.cluster_roots(), config.tls_key().cloned())
    }

    /// Trusting `roots` (`cluster.ca_file`), or, when there are none, the chain of `own`.
    fn with(roots: &[CertificateDer<'_>], own: Option<Arc<CertifiedKey>>) -> Arc<NodeVerifier> {
        let provider = provider();
        let trust = if roots.is_empty() {
            Trust::Own(Own {
                live: OnceLock::new(),
                at_start: own,
                cached: Mutex::new(None),
            })
        } else {
            Trust::Bundle(verifier_over(roots, &provider))
        };
        Arc::new(NodeVerifier { provider, trust })
    }

    /// From now on trust follows the listener's certificate (reloaded on change and SIGHUP).
    pub(crate) fn follow(&self, certificates: Arc<Certificates>) {
        if let Trust::Own(own) = &self.trust {
            let _ = own.live.set(certificates);
        }
    }

    fn check(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let verifier = match &self.trust {
            Trust::Bundle(verifier) => verifier.clone().map_err(Error::General)?,
            Trust::Own(own) => {
                let key = own
                    .live
                    .get()
                    .map(|live| live.current())
                    .or_else(|| own.at_start.clone())
                    .ok_or_else(|| {
                        Error::General(
                            "this node has no tls.cert to trust other nodes by: set \
                             cluster.ca_file"
                                .into(),
                        )
                    })?;
                // The very certificate this node serves (one certificate for every node,
                // whoever issued it): only the name is left to check.
                if key.cert.first() == Some(end_entity) {
                    verify_server_name(&ParsedCertificate::try_from(end_entity)?, name)?;
                    return Ok(ServerCertVerified::assertion());
                }
                own.verifier_for(key, &self.provider)?
            }
        };
        verifier.verify_server_cert(end_entity, intermediates, name, &[], now)
    }
}

impl Own {
    fn verifier_for(
        &self,
        key: Arc<CertifiedKey>,
        provider: &Arc<CryptoProvider>,
    ) -> Result<Arc<WebPkiServerVerifier>, Error> {
        let mut cached = self.cached.lock();
        if let Some((for_key, verifier)) = cached.as_ref() {
            if Arc::ptr_eq(for_key, &key) {
                return Ok(verifier.clone());
            }
        }
        let verifier = verifier_over(&key.cert, provider).map_err(Error::General)?;
        *cached = Some((key, verifier.clone()));
        Ok(verifier)
    }
}

/// A verifier with every certificate of `roots` as a trust anchor.
fn verifier_over(
    roots: &[CertificateDer<'_>],
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(roots.iter().map(|c| c.clone().into_owned()));
    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| format!("no usable certificate to trust other nodes by: {e}"))
}

impl ServerCertVerifier for NodeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        name: &ServerName<'_>,
        _ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.check(end_entity, intermediates, name, now)
            .inspect_err(|error| {
                // Said here, once per refused handshake: the forwarding code sees only
                // "cannot connect".
                tracing::warn!(
                    node = %name.to_str(),
                    %error,
                    "refused TLS to another node: its certificate is not trusted (checked \
                     against cluster.ca_file, or this node's tls.cert when unset); the \
                     request is not passed on"
                );
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::PrivateKeyDer;
    use switchyard_testkit::tls::{Leaf, TestCa};

    use super::*;

    /// `leaf`'s key with `chain` as the certificate file's contents (the leaf first).
    fn served(leaf: &Leaf, chain: &[&str]) -> Arc<CertifiedKey> {
        let certs = chain
            .iter()
            .map(|pem| CertificateDer::from_pem_slice(pem.as_bytes()).unwrap())
            .collect();
        let key = PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).unwrap();
        Arc::new(CertifiedKey::from_der(certs, key, &provider()).unwrap())
    }

    fn check(verifier: &NodeVerifier, leaf: &Leaf, host: &str) -> Result<(), Error> {
        let name = ServerName::try_from(host.to_string()).unwrap();
        verifier
            .verify_server_cert(&leaf.der, &[], &name, &[], UnixTime::now())
            .map(|_| ())
    }

    #[test]
    fn a_certificate_file_with_its_ca_trusts_that_cas_nodes_by_name() {
        let (ca, other_ca) = (TestCa::new(), TestCa::new());
        let mine = ca.leaf("n1");
        let verifier = NodeVerifier::with(&[], Some(served(&mine, &[&mine.cert_pem, &ca.pem])));
        let peer = ca.leaf("n2");
        check(&verifier, &peer, "localhost").unwrap();
        check(&verifier, &peer, "127.0.0.1").unwrap();
        let wrong_name = check(&verifier, &peer, "node.example").unwrap_err();
        assert!(
            format!("{wrong_name}").contains("not valid for name"),
            "{wrong_name}"
        );
        let stranger = check(&verifier, &other_ca.leaf("n9"), "localhost").unwrap_err();
        // Both test CAs have one name, so the other CA's leaf fails on its signature.
        assert!(
            format!("{stranger}").contains("invalid peer certificate"),
            "{stranger}"
        );
    }

    #[test]
    fn a_certificate_shared_by_every_node_is_trusted_by_itself_and_its_names_only() {
        let ca = TestCa::new();
        let shared = ca.leaf("cluster");
        let verifier = NodeVerifier::with(&[], Some(served(&shared, &[&shared.cert_pem])));
        check(&verifier, &shared, "localhost").unwrap();
        assert!(check(&verifier, &shared, "node.example").is_err());
        // Another leaf of the same CA: the CA is not in the file, so it is not trusted.
        assert!(check(&verifier, &ca.leaf("n2"), "localhost").is_err());
    }

    #[test]
    fn a_ca_file_is_trusted_instead_of_the_nodes_own_certificate() {
        let (ca, own_ca) = (TestCa::new(), TestCa::new());
        let roots = [CertificateDer::from_pem_slice(ca.pem.as_bytes()).unwrap()];
        let mine = own_ca.leaf("n1");
        let verifier =
            NodeVerifier::with(&roots, Some(served(&mine, &[&mine.cert_pem, &own_ca.pem])));
        check(&verifier, &ca.leaf("n2"), "localhost").unwrap();
        assert!(check(&verifier, &own_ca.leaf("n3"), "localhost").is_err());
    }

    #[test]
    fn trust_follows_a_reloaded_certificate() {
        let (old_ca, new_ca) = (TestCa::new(), TestCa::new());
        let old = old_ca.leaf("n1");
        let verifier = NodeVerifier::with(&[], Some(served(&old, &[&old.cert_pem, &old_ca.pem])));
        let certificates = Certificates::new(served(&old, &[&old.cert_pem, &old_ca.pem]));
        verifier.follow(certificates.clone());
        let peer = new_ca.leaf("n2");
        assert!(check(&verifier, &peer, "localhost").is_err());
        let new = new_ca.leaf("n1");
        certificates.replace(served(&new, &[&new.cert_pem, &new_ca.pem]));
        check(&verifier, &peer, "localhost").unwrap();
        assert!(check(&verifier, &old_ca.leaf("n3"), "localhost").is_err());
    }

    #[test]
    fn without_tls_or_a_ca_file_no_node_is_trusted() {
        let ca = TestCa::new();
        let error = check(&NodeVerifier::with(&[], None), &ca.leaf("n2"), "localhost").unwrap_err();
        assert!(format!("{error}").contains("cluster.ca_file"), "{error}");
    }
}
