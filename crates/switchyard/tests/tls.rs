//! `serve` with `--tls-cert`/`--tls-key` as a real process: https in what it prints, and a
//! certificate replaced on disk taken on SIGHUP (the change check is set to an hour, so only
//! the signal can have done it).

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

mod common;

use common::binary;

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl Ca {
    fn new() -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "cli test CA");
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: Issuer::new(params, key),
            pem,
        }
    }

    /// Writes a new leaf for 127.0.0.1 to `dir` (key first, then the certificate, each
    /// renamed into place); returns its DER.
    fn write_leaf(&self, dir: &Path, name: &str) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        for (file, text) in [("key.pem", key.serialize_pem()), ("cert.pem", cert.pem())] {
            std::fs::write(dir.join("partial"), text).unwrap();
            std::fs::rename(dir.join("partial"), dir.join(file)).unwrap();
        }
        cert.der().clone()
    }

    /// The certificate a new TLS connection to `port` is given.
    fn presented(&self, port: u16) -> CertificateDer<'static> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.pem.as_bytes()).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let mut connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        while connection.is_handshaking() {
            connection.complete_io(&mut tcp).unwrap();
        }
        connection.peer_certificates().unwrap()[0].clone()
    }
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn serve_with_tls_prints_https_and_reloads_on_sighup() {
    let dir = Dir(std::env::temp_dir().join(format!("switchyard-cli-tls-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let ca = Ca::new();
    let first = ca.write_leaf(&dir.0, "first");
    let cert = dir.0.join("cert.pem");
    let key = dir.0.join("key.pem");
    let tls_args = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ];
    let mut child = binary()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(tls_args)
        .args(["--set", "tls.reload_interval=1h"])
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut port, mut connection_string) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(20);
    while (port.is_none() || connection_string.is_none()) && Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(rest) = line.strip_prefix("Listening on 127.0.0.1:") {
            let (number, note) = rest.split_once(' ').expect("a TLS note after the address");
            assert_eq!(note, "(TLS: https and wss)");
            port = Some(number.parse::<u16>().unwrap());
        }
        if let Some(rest) = line.strip_prefix("ConnectionString: ") {
            connection_string = Some(rest.to_string());
        }
    }
    let port = port.expect("Listening line");
    assert!(connection_string
        .expect("ConnectionString line")
        .starts_with(&format!("Endpoint=https://127.0.0.1;Port={port};")),);
    assert_eq!(ca.presented(port), first);

    let second = ca.write_leaf(&dir.0, "second");
    Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ca.presented(port) != second {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the certificate"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // `connection-string` with the same settings says https too.
    let printed = binary()
        .args([
            "connection-string",
            "--listen",
            &format!("127.0.0.1:{port}"),
        ])
        .args(tls_args)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&printed.stdout)
            .starts_with(&format!("Endpoint=https://127.0.0.1;Port={port};")),
        "{printed:?}"
    );

    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}
