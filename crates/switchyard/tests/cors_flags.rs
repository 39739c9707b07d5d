//! CORS settings reach the running service from flags and variables.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

/// The binary, quiet but for warnings.
fn binary() -> Command {
    let mut command = common::binary();
    command.env("SWITCHYARD_LOG", "warn");
    command
}

/// Starts `serve --listen 127.0.0.1:0 {flags}` and returns it with its port.
fn serve(mut command: Command, flags: &[&str]) -> (Child, u16) {
    let mut child = command
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut port = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(text) = line.strip_prefix("Listening on 127.0.0.1:") {
            port = Some(text.trim().parse().unwrap());
        }
        if let (Some(port), true) = (port, line.starts_with("ConnectionString: ")) {
            // Keep reading stdout so the service never writes to a closed pipe.
            std::thread::spawn(move || lines.for_each(drop));
            return (child, port);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the service did not print its address");
}

/// Status line and headers (lower-cased) of a preflight for GET /api/health from `origin`.
fn preflight(port: u16, origin: &str) -> String {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "OPTIONS /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {origin}\r\n\
         Access-Control-Request-Method: GET\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response.to_ascii_lowercase()
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn cors_origin_flags_and_variable() {
    let (child, port) = serve(
        binary(),
        &[
            "--cors-origin",
            "https://a.example",
            "--cors-origin",
            "http://localhost:3000",
        ],
    );
    for origin in ["https://a.example", "http://localhost:3000"] {
        let response = preflight(port, origin);
        assert!(response.starts_with("http/1.1 204"), "{response}");
        assert!(
            response.contains(&format!("access-control-allow-origin: {origin}\r\n")),
            "{response}"
        );
    }
    let response = preflight(port, "https://b.example");
    assert!(response.starts_with("http/1.1 403"), "{response}");
    assert!(
        !response.contains("access-control-allow-origin"),
        "{response}"
    );
    stop(child);

    let mut command = binary();
    command.env(
        "SWITCHYARD_CORS_ALLOWED_ORIGINS",
        "https://b.example,https://c.example",
    );
    let (child, port) = serve(command, &[]);
    assert!(preflight(port, "https://c.example").starts_with("http/1.1 204"));
    assert!(preflight(port, "https://a.example").starts_with("http/1.1 403"));
    stop(child);

    // Default in development mode: pages on this machine only.
    let (child, port) = serve(binary(), &[]);
    assert!(preflight(port, "https://anything.example").starts_with("http/1.1 403"));
    assert!(preflight(port, "http://localhost:5173").starts_with("http/1.1 204"));
    assert!(preflight(port, "http://127.0.0.1:3000").starts_with("http/1.1 204"));
    stop(child);

    // Default with a key: any origin, echoed.
    let mut command = binary();
    command.env("SWITCHYARD_ACCESS_KEY", "k".repeat(44));
    let (child, port) = serve(command, &[]);
    let response = preflight(port, "https://anything.example");
    assert!(response.starts_with("http/1.1 204"), "{response}");
    assert!(
        response.contains("access-control-allow-origin: https://anything.example\r\n"),
        "{response}"
    );
    assert!(
        response.contains("access-control-allow-credentials: true\r\n"),
        "{response}"
    );
    stop(child);
}

#[test]
fn a_bad_origin_is_refused_at_start() {
    let output = binary()
        .args(["config", "check", "--cors-origin", "app.example.com"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cors.allowed_origins: 'app.example.com' is not an origin"),
        "{stderr}"
    );
}
