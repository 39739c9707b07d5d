//! The binary's command-line contract, run as a real process.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{binary, health};

#[test]
fn serve_prints_connection_string_and_stops_on_sigterm() {
    let mut child = binary()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let mut port = None;
    let mut connection_string = None;
    let deadline = Instant::now() + Duration::from_secs(20);
    while (port.is_none() || connection_string.is_none()) && Instant::now() < deadline {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(rest) = line.strip_prefix("Listening on 127.0.0.1:") {
            port = Some(rest.trim().to_string());
        }
        if let Some(rest) = line.strip_prefix("ConnectionString: ") {
            connection_string = Some(rest.to_string());
        }
    }
    let port = port.expect("Listening line");
    assert_eq!(
        connection_string.expect("ConnectionString line"),
        format!("Endpoint=http://127.0.0.1;Port={port};AccessKey=ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH;Version=1.0;")
    );
    // Health answers without auth.
    let response = health(&port);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    // SIGTERM stops it cleanly.
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A configured key stays out of stdout (audit finding 4); `connection-string` prints it.
#[test]
fn serve_hides_a_configured_key_and_connection_string_prints_it() {
    const KEY: &str = "a-long-random-secret-of-at-least-32-chars";
    let mut child = binary()
        .args(["serve", "--listen", "127.0.0.1:0", "--access-key", KEY])
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut printed = String::new();
    for line in BufReader::new(stdout).lines().take(3) {
        printed.push_str(&line.unwrap());
        printed.push('\n');
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(!printed.contains(KEY), "{printed}");
    assert!(printed.contains("AccessKey=<access_key>;"), "{printed}");
    assert!(
        printed.contains("switchyard connection-string"),
        "{printed}"
    );
    let output = binary()
        .args([
            "connection-string",
            "--access-key",
            KEY,
            "--public-endpoint",
            "https://signalr.example.com",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8(output.stdout).unwrap().trim(),
        format!("Endpoint=https://signalr.example.com;AccessKey={KEY};Version=1.0;")
    );
}

#[test]
fn token_prints_url_and_a_verifiable_token() {
    let output = binary()
        .args([
            "token",
            "--hub",
            "Chat",
            "--user",
            "alice",
            "--ttl",
            "10m",
            "--claim",
            "role=admin",
            "--public-endpoint",
            "http://127.0.0.1:9999",
        ])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    let mut lines = text.lines();
    let url = lines.next().unwrap();
    let token = lines.next().unwrap();
    assert_eq!(url, "http://127.0.0.1:9999/client/?hub=chat");
    let keys = switchyard_auth::AccessKeys::emulator();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let verified = switchyard_auth::verify_token(token, &keys, now, |aud| aud == url).unwrap();
    assert_eq!(verified.user_id(), Some("alice"));
    assert_eq!(verified.claim("role"), Some("admin"));
    assert!(verified.expires_at <= now + 600 && verified.expires_at >= now + 590);

    let json = binary()
        .args(["token", "--hub", "chat", "--json"])
        .output()
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(value["url"], "http://127.0.0.1:8888/client/?hub=chat");
    assert!(value["accessToken"].as_str().unwrap().split('.').count() == 3);
}

/// A token the service would refuse (longer than `limits.max_token_lifetime`, 24 h unless
/// set) is not minted; the limit the service is given is the one checked.
#[test]
fn token_refuses_a_lifetime_the_service_would_refuse() {
    fails_with(
        &["token", "--hub", "chat", "--ttl", "30d"],
        &[],
        "limits.max_token_lifetime",
    );
    let raised = binary()
        .args(["token", "--hub", "chat", "--ttl", "30d"])
        .env("SWITCHYARD_LIMITS_MAX_TOKEN_LIFETIME", "0")
        .output()
        .unwrap();
    assert!(raised.status.success(), "{raised:?}");
}

/// The operator's address carries the token after `#`, which browsers never send: it stays
/// out of access logs, proxies and `Referer`.
#[test]
fn the_dashboard_address_keeps_its_token_out_of_requests() {
    let output = binary()
        .args(["token", "--admin", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success());
    let value: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let url = value["url"].as_str().unwrap();
    let token = value["accessToken"].as_str().unwrap();
    assert_eq!(
        url,
        format!("http://127.0.0.1:8888/dashboard#access_token={token}")
    );
}

fn fails_with(args: &[&str], env: &[(&str, &str)], needle: &str) {
    let mut command = binary();
    command.args(args);
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{args:?} should fail");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(needle),
        "stderr {stderr:?} should contain {needle:?}"
    );
}

#[test]
fn configuration_errors_are_clear() {
    fails_with(
        &["serve"],
        &[("SWITCHYARD_LISTNE", "x")],
        "unknown environment variable SWITCHYARD_LISTNE",
    );
    fails_with(
        &["serve", "--set", "limits.nope=1"],
        &[],
        "unknown setting 'limits.nope'",
    );
    fails_with(&["serve", "--listen", "0.0.0.0:0"], &[], "development mode");
    fails_with(
        &["serve", "--access-key", "short"],
        &[],
        "at least 32 characters",
    );
    // The Emulator's public key is no secret: never off loopback (audit finding 9).
    fails_with(
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--public-endpoint",
            "https://signalr.example.com",
            "--access-key",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH",
        ],
        &[],
        "publicly known key",
    );
    // Tokens name the public endpoint: an unspecified address needs one.
    fails_with(
        &[
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--access-key",
            "a-long-random-secret-of-at-least-32-chars",
        ],
        &[],
        "public_endpoint is required",
    );
    fails_with(
        &["serve", "--set", "trusted_proxies=10.0.0.0/8,nope"],
        &[],
        "'nope' is not an IP address",
    );
    let dir = std::env::temp_dir().join(format!("switchyard-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[timeouts]\nclient_timeot = \"30s\"\n").unwrap();
    fails_with(
        &["serve", "--config", file.to_str().unwrap()],
        &[],
        "client_timeot",
    );
    fails_with(
        &["serve", "--config", "/nonexistent/switchyard.toml"],
        &[],
        "cannot read config file",
    );
    // TLS: both files or neither; a file that is not there is named.
    fails_with(
        &["serve", "--tls-cert", "/nonexistent/cert.pem"],
        &[],
        "set both or neither",
    );
    fails_with(
        &["serve"],
        &[
            ("SWITCHYARD_TLS_CERT", "/nonexistent/cert.pem"),
            ("SWITCHYARD_TLS_KEY", "/nonexistent/key.pem"),
        ],
        "tls.cert /nonexistent/cert.pem",
    );
    fails_with(
        &["serve", "--set", "upstream.ca_file=/nonexistent/ca.pem"],
        &[],
        "upstream.ca_file: /nonexistent/ca.pem",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn upstream_init_writes_a_sample_and_keeps_an_existing_one() {
    let dir = std::env::temp_dir().join(format!("switchyard-init-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.join("config");
    let file = out.join("switchyard.toml");
    let output = binary()
        .args(["upstream", "init", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("[[upstream.templates]]"), "{text}");
    assert!(
        text.contains("url_template = \"http://localhost:7071/runtime/webhooks/signalr\""),
        "{text}"
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("switchyard.toml"));
    // The service accepts the file as written.
    let token = binary()
        .args(["token", "--hub", "chat", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(token.status.success(), "{token:?}");
    // A second init keeps the (edited) file, unless --force.
    std::fs::write(&file, "# mine\n").unwrap();
    fails_with(
        &["upstream", "init", "-o", out.to_str().unwrap()],
        &[],
        "already exists; use --force",
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "# mine\n");
    let forced = binary()
        .args([
            "upstream",
            "init",
            "--output",
            out.to_str().unwrap(),
            "--force",
        ])
        .output()
        .unwrap();
    assert!(forced.status.success(), "{forced:?}");
    assert!(std::fs::read_to_string(&file)
        .unwrap()
        .contains("[[upstream.templates]]"));
    // A broken template is refused at start, naming the key.
    std::fs::write(
        &file,
        "[[upstream.templates]]\nurl_template = \"http://x/{hubb}\"\n",
    )
    .unwrap();
    fails_with(
        &["serve", "--config", file.to_str().unwrap()],
        &[],
        "upstream.templates[0].url_template",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Joining a cluster: a Redis URL that does not parse, a Redis that does not answer and a node
/// id another node already uses all stop the start with a clear error (never a quiet fall back
/// to one node).
#[test]
fn cluster_start_errors_are_clear() {
    fails_with(
        &["serve", "--listen", "127.0.0.1:0", "--redis", "http://x"],
        &[],
        "no backplane for the scheme \"http\"; this build knows redis:// and rediss:// (one \
         Redis, rediss with TLS) and redis-cluster:// and rediss-cluster:// (a Redis Cluster) \
         (flag --redis)",
    );
    fails_with(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--backplane",
            "redis:/x",
        ],
        &[],
        "cluster.backplane must be a URL",
    );
    fails_with(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--set",
            "cluster.internal_url=http://x/path",
        ],
        &[],
        "cluster.internal_url",
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    fails_with(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--redis",
            &format!("redis://:secret@127.0.0.1:{closed}"),
        ],
        &[],
        "cannot reach redis",
    );

    let redis = switchyard_testkit::RedisServer::start();
    let mut first = binary()
        .args(["serve", "--listen", "127.0.0.1:0", "--node-id", "twin"])
        .args(["--backplane", &redis.url()])
        .env("SWITCHYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    let listening = lines.any(|line| line.is_ok_and(|l| l.starts_with("Listening on")));
    assert!(listening, "the first node started");
    fails_with(
        &["serve", "--listen", "127.0.0.1:0", "--node-id", "twin"],
        &[("SWITCHYARD_CLUSTER_REDIS", &redis.url())],
        "node id \"twin\" is already used",
    );
    let _ = first.kill();
    let _ = first.wait();
}

#[test]
fn serve_keeps_serving_when_its_stdout_reader_is_gone() {
    let mut child = binary()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("SWITCHYARD_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader of its stdout leaves at once (`switchyard serve | head -0`): every status
    // line after that meets a closed pipe.
    drop(child.stdout.take());
    // Its logs are read to the end, so that only stdout is cut off.
    let (tx, logs) = std::sync::mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut port = None;
    while let Ok(line) = logs.recv_timeout(Duration::from_secs(20)) {
        if line.contains("switchyard serving") {
            let at = line.find("bound=127.0.0.1:").expect("the bound address") + 16;
            let digits: String = line[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            port = Some(digits);
            break;
        }
    }
    let port = port.expect("the service started serving");
    let response = health(&port);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A variable that is not Unicode, ours or not, must not panic the binary (`std::env::vars`
/// would): another program's is ignored, one of ours is read lossily and refused as a value.
#[cfg(unix)]
#[test]
fn variables_that_are_not_unicode_do_not_panic() {
    use std::os::unix::ffi::OsStrExt;
    let not_unicode = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let output = binary()
        .args(["config", "check"])
        .env("SOMEONE_ELSES", not_unicode)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = binary()
        .args(["config", "check"])
        .env("SWITCHYARD_LISTEN", not_unicode)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("SWITCHYARD_LISTEN"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
