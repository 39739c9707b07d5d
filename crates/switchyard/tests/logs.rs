//! The binary's logs as an operator reads them: stderr piped (not a terminal), JSON lines
//! with stable fields, text without colour codes, close reasons that tell a dropped socket
//! from a protocol error, and refused connects counted and logged without flooding.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::binary;

/// A running `switchyard serve` on port 0, its stderr lines collected by a thread.
struct Served {
    child: Child,
    port: u16,
    stderr: Receiver<String>,
    /// Every stderr line read so far.
    seen: Vec<String>,
}

impl Served {
    fn start(extra: &[&str]) -> Served {
        let mut child = binary()
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("SWITCHYARD_LOG", "info")
            .env_remove("NO_COLOR")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut port = None;
        for line in stdout.by_ref() {
            let line = line.unwrap();
            if let Some(rest) = line.strip_prefix("Listening on 127.0.0.1:") {
                port = Some(rest.trim().parse().unwrap());
                break;
            }
        }
        // Kept open and read: the service writes more to stdout, and would fail writing to
        // a closed pipe.
        std::thread::spawn(move || stdout.for_each(drop));
        let (tx, stderr) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Served {
            child,
            port: port.expect("Listening line"),
            stderr,
            seen: Vec::new(),
        }
    }

    /// Waits for a JSON line for which `wanted` holds, returning it.
    fn wait_json(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(found) = self.seen.iter().map(|l| parse(l)).find(|v| wanted(v)) {
            return found;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Ok(line) = self
            .stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            let value = parse(&line);
            self.seen.push(line);
            if wanted(&value) {
                return value;
            }
        }
        panic!("no log line {what} in {:#?}", self.seen);
    }

    /// Collects whatever arrives within `wait`.
    fn drain(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while let Ok(line) = self
            .stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(line);
        }
    }

    fn token(&self, hub: &str) -> String {
        let output = binary()
            .args(["token", "--hub", hub, "--user", "alice", "--listen"])
            .arg(format!("127.0.0.1:{}", self.port))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "switchyard token: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let text = String::from_utf8(output.stdout).unwrap();
        text.lines().nth(1).unwrap().to_string()
    }

    fn metrics(&self) -> String {
        http(self.port, "GET", "/metrics", "")
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"))
}

/// One HTTP/1.1 request, the whole response as text.
fn http(port: u16, method: &str, path: &str, headers: &str) -> String {
    http_with_body(port, method, path, headers, "")
}

fn http_with_body(port: u16, method: &str, path: &str, headers: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {}\r\n{headers}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// A WebSocket client written by hand, so that it can vanish without a close frame.
struct RawSocket(TcpStream);

impl RawSocket {
    /// Connects to `hub` (no negotiate) and completes the SignalR JSON handshake.
    fn connect(port: u16, hub: &str, token: &str) -> RawSocket {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET /client/?hub={hub}&access_token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
             Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        .unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            stream.read_exact(&mut byte).unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        let mut socket = RawSocket(stream);
        socket.send_text(b"{\"protocol\":\"json\",\"version\":1}\x1e");
        assert_eq!(socket.read_text(), b"{}\x1e");
        socket
    }

    /// A masked text frame (clients must mask), payload under 126 bytes.
    fn send_text(&mut self, payload: &[u8]) {
        assert!(payload.len() < 126);
        let mask = [1u8, 2, 3, 4];
        let mut frame = vec![0x81, 0x80 | payload.len() as u8];
        frame.extend_from_slice(&mask);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.0.write_all(&frame).unwrap();
    }

    /// The next frame's payload (the server's are unmasked and short here).
    fn read_text(&mut self) -> Vec<u8> {
        let mut head = [0u8; 2];
        self.0.read_exact(&mut head).unwrap();
        let len = match head[1] & 0x7f {
            126 => {
                let mut ext = [0u8; 2];
                self.0.read_exact(&mut ext).unwrap();
                u16::from_be_bytes(ext) as usize
            }
            len => len as usize,
        };
        let mut payload = vec![0u8; len];
        self.0.read_exact(&mut payload).unwrap();
        payload
    }
}

fn is_event(value: &Value, event: &str) -> bool {
    value["event"] == event && value["target"] == "switchyard::connections"
}

fn counter(metrics: &str, name_and_labels: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits until the metric reaches `at_least`, returning its value.
fn wait_counter(served: &Served, name_and_labels: &str, at_least: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let value = counter(&served.metrics(), name_and_labels);
        if value >= at_least || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn json_logs_carry_connects_and_closes_with_their_reasons() {
    let mut served = Served::start(&["--log-format", "json"]);
    let token = served.token("chat");

    // A client that closes with a Close message.
    let mut client = RawSocket::connect(served.port, "chat", &token);
    let connected = served.wait_json("connected", |v| is_event(v, "connected"));
    let id = connected["connection_id"].as_str().unwrap().to_string();
    assert_eq!(connected["hub"], "chat");
    assert_eq!(connected["kind"], "client");
    assert_eq!(connected["user_id"], "alice");
    assert_eq!(connected["transport"], "WebSockets");
    assert_eq!(connected["protocol"], "json");
    assert_eq!(connected["level"], "INFO");
    assert!(connected["timestamp"].is_string(), "{connected}");
    client.send_text(b"{\"type\":7}\x1e");
    let closed = served.wait_json("disconnected (client_closed)", |v| {
        is_event(v, "disconnected") && v["connection_id"] == id.as_str()
    });
    assert_eq!(closed["reason"], "client_closed");
    assert_eq!(closed["hub"], "chat");
    assert!(closed.get("detail").is_none(), "{closed}");

    // A client whose socket just goes away, without a close frame: a socket error, not a
    // protocol error.
    let client = RawSocket::connect(served.port, "chat", &token);
    let connected = served.wait_json("second connected", |v| {
        is_event(v, "connected") && v["connection_id"] != id.as_str()
    });
    let second = connected["connection_id"].as_str().unwrap().to_string();
    drop(client);
    let closed = served.wait_json("disconnected (socket_error)", |v| {
        is_event(v, "disconnected") && v["connection_id"] == second.as_str()
    });
    assert_eq!(closed["reason"], "socket_error", "{closed}");
    assert!(closed["detail"].as_str().unwrap().contains("socket error"));
    let metrics = served.metrics();
    assert_eq!(
        counter(
            &metrics,
            "switchyard_client_connections_closed_total{reason=\"socket_error\"}"
        ),
        1,
        "{metrics}"
    );
    assert_eq!(
        counter(
            &metrics,
            "switchyard_client_connections_closed_total{reason=\"protocol_error\"}"
        ),
        0,
        "{metrics}"
    );

    // Every line so far is one JSON object with the standard fields; message logs are off.
    served.drain(Duration::from_millis(200));
    assert!(served.seen.len() >= 4);
    for line in &served.seen {
        let value = parse(line);
        for field in ["timestamp", "level", "target"] {
            assert!(value.get(field).is_some(), "{field} missing in {line}");
        }
        assert_ne!(value["target"], "switchyard::messages", "{line}");
    }
}

#[test]
fn refused_connects_are_counted_and_their_logs_rate_limited() {
    let mut served = Served::start(&["--log-format", "json"]);
    let port = served.port;
    // A bad client in a loop: every refusal is counted, few are logged.
    const TRIES: u64 = 40;
    for _ in 0..TRIES {
        let response = http(
            port,
            "POST",
            "/client/negotiate?hub=chat&negotiateVersion=1",
            "Authorization: Bearer not-a-token\r\n",
        );
        assert!(response.starts_with("HTTP/1.1 401"), "{response}");
    }
    assert_eq!(
        wait_counter(
            &served,
            "switchyard_client_connections_refused_total{reason=\"token_invalid\"}",
            TRIES
        ),
        TRIES
    );
    let first = served.wait_json("refused", |v| is_event(v, "refused"));
    assert_eq!(first["reason"], "token_invalid");
    assert_eq!(first["hub"], "chat");
    assert_eq!(first["kind"], "client");
    assert_eq!(first["source"], "127.0.0.1");
    // The flood stops: about a second later a line says how many were left out, without
    // waiting for another refusal.
    served.wait_json("the count of those left out", |v| {
        is_event(v, "refused") && v["suppressed"].as_u64().unwrap_or(0) > 0
    });
    // A later refusal is logged in full.
    let expired = http(
        port,
        "POST",
        "/client/negotiate?hub=chat&negotiateVersion=1",
        "Authorization: Bearer a.b.c\r\n",
    );
    assert!(expired.starts_with("HTTP/1.1 401"), "{expired}");
    served.drain(Duration::from_millis(300));
    let lines: Vec<Value> = served
        .seen
        .iter()
        .map(|l| parse(l))
        .filter(|v| is_event(v, "refused"))
        .collect();
    // Refusals have a reason; the heartbeat's count of those left out has none.
    let refused: Vec<&Value> = lines.iter().filter(|v| v.get("reason").is_some()).collect();
    let logged = refused.len() as u64;
    let suppressed: u64 = lines
        .iter()
        .map(|v| v["suppressed"].as_u64().unwrap())
        .sum();
    assert!(logged < TRIES, "{logged} lines for {TRIES} refusals");
    // Nothing is lost from the account: logged + reported as left out = all refusals.
    assert_eq!(logged + suppressed, TRIES + 1, "{lines:#?}");
}

#[test]
fn text_logs_to_a_pipe_have_no_colour_codes() {
    let mut served = Served::start(&[]);
    let token = served.token("chat");
    let mut client = RawSocket::connect(served.port, "chat", &token);
    client.send_text(b"{\"type\":7}\x1e");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !served
        .seen
        .iter()
        .any(|l| l.contains("client disconnected"))
    {
        assert!(Instant::now() < deadline, "{:#?}", served.seen);
        served.drain(Duration::from_millis(100));
    }
    let all = served.seen.join("\n");
    assert!(!all.contains('\x1b'), "{all}");
    assert!(all.contains("event=\"disconnected\""), "{all}");
    assert!(all.contains("reason=\"client_closed\""), "{all}");
}

#[test]
fn message_logs_are_opt_in_and_never_carry_the_payload() {
    let mut served = Served::start(&["--log-format", "json", "--set", "log.messages=true"]);
    let token = served.token("chat");
    let mut client = RawSocket::connect(served.port, "chat", &token);
    // A broadcast through REST: logged once per delivery, with the method, not the payload.
    let port = served.port;
    let audience = format!("http://127.0.0.1:{port}/api/hubs/chat/:send");
    let output = binary()
        .args(["token", "--audience", &audience, "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .unwrap();
    let rest_token = String::from_utf8(output.stdout).unwrap();
    let rest_token = rest_token.lines().nth(1).unwrap();
    let sent = http_with_body(
        port,
        "POST",
        "/api/hubs/chat/:send",
        &format!("Authorization: Bearer {rest_token}\r\nContent-Type: application/json\r\n"),
        "{\"target\":\"newMessage\",\"arguments\":[\"SECRET\"]}",
    );
    assert!(sent.starts_with("HTTP/1.1 202"), "{sent}");
    let delivered = client.read_text();
    let out = served.wait_json("message out", |v| {
        v["target"] == "switchyard::messages" && v["direction"] == "out"
    });
    assert_eq!(out["method"], "newMessage");
    assert_eq!(out["type"], "invocation");
    assert_eq!(out["size"].as_u64(), Some(delivered.len() as u64));
    // A non-blocking invocation with no upstream closes the connection (serverless), but it
    // is received, and logged, first.
    client.send_text(b"{\"type\":1,\"target\":\"send\",\"arguments\":[\"SECRET\"]}\x1e");
    let line = served.wait_json("message in", |v| {
        v["target"] == "switchyard::messages" && v["direction"] == "in"
    });
    assert_eq!(line["method"], "send");
    assert_eq!(line["type"], "invocation");
    assert_eq!(line["hub"], "chat");
    assert_eq!(line["size"], 50);
    // The Close message the service writes goes out as a frame of its own, not through the
    // queue; what does go out is logged per message, never with its payload.
    served.drain(Duration::from_millis(300));
    assert!(served.seen.iter().all(|l| !l.contains("SECRET")));
}

/// A SIGHUP (systemd's reload, a closed terminal) ends a process by default; without TLS
/// files to reload, the service logs it and keeps serving. A build without the handler dies
/// on the signal, and the health check after it fails.
#[cfg(unix)]
#[test]
fn a_hangup_without_tls_files_is_logged_and_survived() {
    let mut served = Served::start(&["--log-format", "json"]);
    let port = served.port.to_string();
    // Health answers once the listener runs, which is after the handler is in place.
    assert!(common::health(&port).starts_with("HTTP/1.1 200"));
    for _ in 0..2 {
        let status = std::process::Command::new("kill")
            .args(["-HUP", &served.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        served.wait_json("SIGHUP: nothing to reload", |v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("SIGHUP: nothing to reload"))
        });
        served.seen.clear();
    }
    assert!(
        served.child.try_wait().unwrap().is_none(),
        "the service exited"
    );
    assert!(common::health(&port).starts_with("HTTP/1.1 200"));
}
