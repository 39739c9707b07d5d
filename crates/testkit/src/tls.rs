//! [`TestCa`]: a certificate authority made for one test (rcgen), its leaves for 127.0.0.1,
//! and clients that trust it, so TLS tests need no files from outside and no public CA.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use switchyard_client::TlsRoots;

use crate::{within, WAIT};

/// A certificate authority of the test's own.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate, PEM.
    pub pem: String,
}

/// A leaf certificate and its key, as PEM (for files and settings) and DER (to compare).
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
    pub der: CertificateDer<'static>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().expect("a CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "Switchyard test CA");
        let pem = params.self_signed(&key).expect("the CA certificate").pem();
        TestCa {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// A leaf for 127.0.0.1 and localhost, named `name` (its common name).
    pub fn leaf(&self, name: &str) -> Leaf {
        let key = KeyPair::generate().expect("a leaf key");
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
                .expect("leaf parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &self.issuer).expect("a signed leaf");
        Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Writes a new leaf to `dir` as `key.pem` and `cert.pem`, key first, each renamed into
    /// place (a reload never sees half a file); returns its DER.
    pub fn write_leaf(&self, dir: &Path, name: &str) -> CertificateDer<'static> {
        let leaf = self.leaf(name);
        for (file, text) in [("key.pem", &leaf.key_pem), ("cert.pem", &leaf.cert_pem)] {
            let partial = dir.join(format!("{file}.partial"));
            std::fs::write(&partial, text).expect("writing a certificate file");
            std::fs::rename(&partial, dir.join(file)).expect("renaming it into place");
        }
        leaf.der
    }

    /// The roots the SDK's clients and app servers trust (this CA only, beside the public ones).
    pub fn roots(&self) -> TlsRoots {
        TlsRoots::with_pem(self.pem.as_bytes()).expect("the CA as roots")
    }

    pub fn reqwest_root(&self) -> reqwest::Certificate {
        reqwest::Certificate::from_pem(self.pem.as_bytes()).expect("the CA for reqwest")
    }

    /// A rustls client configuration that trusts only this CA.
    pub fn client_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.pem.as_bytes()).expect("the CA's DER"))
            .expect("a root");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        Arc::new(config)
    }

    /// The certificate a new TLS connection to `addr` is given (as 127.0.0.1).
    pub async fn presented(&self, addr: SocketAddr) -> CertificateDer<'static> {
        let connector = tokio_rustls::TlsConnector::from(self.client_config());
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .expect("a TCP connection");
        let stream = within("TLS handshake", WAIT, connector.connect(localhost(), tcp))
            .await
            .expect("a TLS handshake");
        stream
            .get_ref()
            .1
            .peer_certificates()
            .expect("a certificate")[0]
            .clone()
    }

    /// [`Self::presented`] for tests outside a runtime (a blocking socket).
    pub fn presented_blocking(&self, port: u16) -> CertificateDer<'static> {
        let mut connection =
            rustls::ClientConnection::new(self.client_config(), localhost()).expect("a TLS client");
        let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).expect("a TCP connection");
        tcp.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("a read timeout");
        while connection.is_handshaking() {
            connection.complete_io(&mut tcp).expect("a TLS handshake");
        }
        connection.peer_certificates().expect("a certificate")[0].clone()
    }
}

impl Default for TestCa {
    fn default() -> Self {
        TestCa::new()
    }
}

fn localhost() -> ServerName<'static> {
    ServerName::try_from("127.0.0.1").expect("an IP server name")
}
