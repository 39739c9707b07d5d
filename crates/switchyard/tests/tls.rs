//! `serve` with `--tls-cert`/`--tls-key` as a real process: https in what it prints, and a
//! certificate replaced on disk taken on SIGHUP (the change check is set to an hour, so only
//! the signal can have done it).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use switchyard_testkit::tls::TestCa;

mod common;

use common::binary;

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
    let ca = TestCa::new();
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
    assert_eq!(ca.presented_blocking(port), first);

    let second = ca.write_leaf(&dir.0, "second");
    Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ca.presented_blocking(port) != second {
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

/// A key that is not the certificate's names both files and what to check, not rustls's
/// bare `KeyMismatch`.
#[test]
fn a_key_of_another_certificate_names_both_files() {
    let dir = Dir(std::env::temp_dir().join(format!(
        "switchyard-cli-tls-mismatch-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let ca = TestCa::new();
    ca.write_leaf(&dir.0, "mine");
    let cert = dir.0.join("cert.pem");
    let other_key = dir.0.join("other-key.pem");
    std::fs::write(&other_key, ca.leaf("theirs").key_pem).unwrap();
    let output = binary()
        .args(["config", "check", "--tls-cert", cert.to_str().unwrap()])
        .args(["--tls-key", other_key.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(cert.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains(other_key.to_str().unwrap()), "{stderr}");
    assert!(stderr.contains("same issuance"), "{stderr}");
    assert!(!stderr.contains("KeyMismatch"), "{stderr}");
}
