//! Shared by the load-generator examples (`idle`, `broadcast`): flag parsing, tokens, and one
//! real client connection (negotiate → WebSocket → handshake).
#![allow(dead_code)]

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use switchyard_auth::TokenBuilder;
use switchyard_client::{negotiate, ClientError, WsClient};
use switchyard_hub_protocol::Format;

/// The Azure SignalR Emulator's well-known key (what a development-mode service accepts).
pub const EMULATOR_KEY: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH";

/// `--name value` flags; `--help` prints `usage` and exits.
pub struct Flags {
    values: BTreeMap<String, String>,
}

impl Flags {
    pub fn parse(usage: &str, known: &[&str]) -> Flags {
        let mut values = BTreeMap::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                println!("{usage}");
                std::process::exit(0);
            }
            let Some(name) = arg.strip_prefix("--") else {
                fail(usage, &format!("unexpected argument '{arg}'"));
            };
            let (name, value) = match name.split_once('=') {
                Some((n, v)) => (n.to_string(), v.to_string()),
                None => match args.next() {
                    Some(v) => (name.to_string(), v),
                    None => fail(usage, &format!("--{name} needs a value")),
                },
            };
            if !known.contains(&name.as_str()) {
                fail(usage, &format!("unknown flag --{name}"));
            }
            values.insert(name, value);
        }
        Flags { values }
    }

    pub fn get<T: FromStr>(&self, name: &str, default: T) -> T {
        match self.values.get(name) {
            Some(text) => text.parse().unwrap_or_else(|_| {
                eprintln!("error: bad value for --{name}: '{text}'");
                std::process::exit(2)
            }),
            None => default,
        }
    }

    pub fn string(&self, name: &str, default: &str) -> String {
        self.values
            .get(name)
            .cloned()
            .unwrap_or_else(|| default.to_string())
    }
}

fn fail(usage: &str, message: &str) -> ! {
    eprintln!("error: {message}\n\n{usage}");
    std::process::exit(2)
}

pub fn parse_format(text: &str) -> Format {
    match text.to_ascii_lowercase().as_str() {
        "json" => Format::Json,
        "messagepack" | "msgpack" => Format::MessagePack,
        other => {
            eprintln!("error: --protocol must be json or messagepack, got '{other}'");
            std::process::exit(2)
        }
    }
}

pub fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Where to connect and how to sign.
#[derive(Clone)]
pub struct Target {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub endpoint: String,
    pub hub: String,
    pub access_key: String,
    pub format: Format,
}

impl Target {
    /// `http://127.0.0.1:PORT/client/?hub=H`: the negotiate base and the client token audience.
    pub fn client_base(&self) -> String {
        format!("{}/client/?hub={}", self.endpoint, self.hub)
    }

    /// A client token (`aud` = the client URL), optionally with a user id.
    pub fn client_token(&self, user: Option<&str>) -> String {
        let mut builder = TokenBuilder::new(self.client_base()).lifetime(Duration::from_secs(3600));
        if let Some(user) = user {
            builder = builder
                .claim("asrs.s.uid", user.to_string())
                .claim("nameid", user.to_string());
        }
        builder.sign(&self.access_key, now_unix())
    }

    /// A REST token whose `aud` is the request URL.
    pub fn rest_token(&self, url: &str) -> String {
        TokenBuilder::new(url)
            .lifetime(Duration::from_secs(3600))
            .sign(&self.access_key, now_unix())
    }
}

/// Which step of the connect path failed.
#[derive(Debug)]
pub struct ConnectError {
    pub stage: &'static str,
    pub error: String,
}

impl ConnectError {
    /// A short key for counting failures by kind.
    pub fn kind(&self) -> String {
        let mut text = format!("{}: {}", self.stage, self.error);
        if text.len() > 120 {
            let mut cut = 120;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        text
    }
}

/// The real client path: POST negotiate (v1) with a bearer token, WebSocket connect with
/// `id=connectionToken`, then the hub-protocol handshake.
pub async fn connect(target: &Target, user: Option<&str>) -> Result<WsClient, ConnectError> {
    let token = target.client_token(user);
    let negotiated = negotiate(&target.client_base(), &token, 1)
        .await
        .map_err(|e| ConnectError {
            stage: "negotiate",
            error: describe(&e),
        })?;
    if !negotiated.transports.is_empty() && !negotiated.transports.iter().any(|t| t == "WebSockets")
    {
        return Err(ConnectError {
            stage: "negotiate",
            error: format!("no WebSockets transport: {:?}", negotiated.transports),
        });
    }
    let ws_base = target
        .endpoint
        .replacen("https://", "wss://", 1)
        .replacen("http://", "ws://", 1);
    let url = format!(
        "{ws_base}/client/?hub={}&id={}",
        target.hub,
        query_escape(&negotiated.id_value)
    );
    WsClient::connect(&url, Some(&token), target.format)
        .await
        .map_err(|e| ConnectError {
            stage: "websocket",
            error: describe(&e),
        })
}

fn describe(error: &ClientError) -> String {
    // reqwest's Display hides the cause ("error sending request"); include the chain.
    switchyard_client::with_causes(error)
}

fn query_escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Failure counts by kind.
#[derive(Default)]
pub struct ErrorTally {
    counts: Mutex<BTreeMap<String, u64>>,
}

impl ErrorTally {
    pub fn add(&self, kind: String) {
        *self.counts.lock().entry(kind).or_insert(0) += 1;
    }

    pub fn print(&self, label: &str) {
        let counts = self.counts.lock();
        for (kind, count) in counts.iter() {
            println!("{label} count={count} kind={kind:?}");
        }
    }
}

/// Reads `VmRSS` (kB) of a process, if `--service-pid` was given (for the reports).
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}
