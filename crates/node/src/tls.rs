//! TLS: the listener's certificate, swapped in place when its files change (the cluster
//! trusts other nodes by it unless `cluster.ca_file` is set), and the PEM files of trusted
//! roots for https upstreams and other nodes. rustls with the ring provider only.
//!
//! A reload that fails (unreadable file, bad PEM, a key that is not the certificate's)
//! keeps the certificate in use; it is logged and counted, and the next change of the files
//! is tried again. Connections already open keep the certificate they were made with.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use parking_lot::RwLock;
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::metrics::{Metrics, ResultLabel};

/// The one crypto provider of the process's TLS.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A certificate chain and its private key from PEM files, checked to belong together.
pub(crate) fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("tls.cert {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "tls.cert {}: no CERTIFICATE block in the file",
            cert.display()
        ));
    }
    let private_key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("tls.key {}: {e}", key.display()))?;
    CertifiedKey::from_der(chain, private_key, &provider()).map_err(|e| mismatch(cert, key, &e))
}

/// Why a certificate and a key cannot be used together, with the two files and what to check
/// (rustls says only `KeyMismatch`).
fn mismatch(cert: &Path, key: &Path, error: &rustls::Error) -> String {
    let (cert, key) = (cert.display(), key.display());
    match error {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
            "tls.key {key} does not go with tls.cert {cert}: the private key is not the key of \
             the first certificate in {cert}. Check that both files come from the same \
             issuance (a renewal writes a new key with the new certificate; copy both), that \
             {cert} starts with the server's own certificate and not an intermediate or CA \
             one, and that the two paths are not swapped or pointing at another site's files"
        ),
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown) => format!(
            "tls.key {key} cannot be checked against tls.cert {cert}: the key's type gives no \
             public key to compare; use an RSA, ECDSA (P-256, P-384) or Ed25519 key"
        ),
        other => format!(
            "tls.key {key} cannot be used with tls.cert {cert}: {other}; check that the key \
             is an RSA, ECDSA (P-256, P-384) or Ed25519 private key in PEM"
        ),
    }
}

/// Every certificate in a PEM bundle (at least one).
pub(crate) fn load_roots(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let roots = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if roots.is_empty() {
        return Err(format!(
            "{}: no CERTIFICATE block in the file",
            path.display()
        ));
    }
    Ok(roots)
}

/// The certificate new handshakes get.
#[derive(Debug)]
pub(crate) struct Certificates {
    current: RwLock<Arc<CertifiedKey>>,
}

impl Certificates {
    pub(crate) fn new(key: Arc<CertifiedKey>) -> Arc<Certificates> {
        Arc::new(Certificates {
            current: RwLock::new(key),
        })
    }

    /// The certificate in use now (the cluster trusts other nodes by it).
    pub(crate) fn current(&self) -> Arc<CertifiedKey> {
        self.current.read().clone()
    }

    /// Puts `key` in use for new handshakes.
    pub(crate) fn replace(&self, key: Arc<CertifiedKey>) {
        *self.current.write() = key;
    }

    /// Offers ALPN `h2` and `http/1.1`. WebSockets stay on HTTP/1.1: extended CONNECT
    /// (WebSockets over h2) is off, so browsers open an h1 connection for them.
    pub(crate) fn acceptor(self: &Arc<Self>) -> TlsAcceptor {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        TlsAcceptor::from(Arc::new(config))
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().clone())
    }
}

/// What a file looked like at the last check: a change of either is a reason to reload.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The files behind [`Certificates`], reloaded when they change (checked every `interval`)
/// and on `hangup` (SIGHUP). Runs until dropped.
pub(crate) async fn watch(
    certificates: Arc<Certificates>,
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
    metrics: Arc<Metrics>,
    mut hangup: Hangup,
) {
    let mut seen = (stamp(&cert), stamp(&key));
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let forced = tokio::select! {
            _ = ticks.tick() => false,
            _ = next_hangup(&mut hangup) => true,
        };
        let now = (stamp(&cert), stamp(&key));
        if !forced && now == seen {
            continue;
        }
        // Noted before the attempt: a file caught half-written fails once, and its last
        // write changes the stamp again.
        seen = now;
        // Two small files: read in place.
        let result = match load_certified_key(&cert, &key) {
            Ok(loaded) => {
                certificates.replace(Arc::new(loaded));
                tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                "ok"
            }
            Err(error) => {
                tracing::error!(%error, "TLS certificate not reloaded; the previous one stays in use");
                "error"
            }
        };
        metrics
            .tls_reloads
            .get_or_create(&ResultLabel { result })
            .inc();
    }
}

/// Without certificate files to reload, a SIGHUP (systemd's reload, a terminal that closed)
/// must not end the service, as it would by default: it is logged and otherwise ignored.
/// Runs until dropped.
pub(crate) async fn ignore_hangups(mut hangup: Hangup) {
    loop {
        next_hangup(&mut hangup).await;
        tracing::info!("SIGHUP: nothing to reload (no TLS certificate files)");
    }
}

#[cfg(unix)]
pub(crate) type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
pub(crate) type Hangup = ();

/// Takes SIGHUP over from its default (ending the process). Called before the listener
/// announces itself, so that no SIGHUP after that can end the service.
#[cfg(unix)]
pub(crate) fn hangup_signal() -> Hangup {
    use tokio::signal::unix::{signal, SignalKind};
    signal(SignalKind::hangup())
        .map_err(
            |error| tracing::warn!(%error, "no SIGHUP handler; certificates reload on change only"),
        )
        .ok()
}

#[cfg(not(unix))]
pub(crate) fn hangup_signal() -> Hangup {}

#[cfg(unix)]
async fn next_hangup(hangup: &mut Hangup) {
    match hangup {
        Some(signal) => {
            if signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangup) {
    std::future::pending().await
}
