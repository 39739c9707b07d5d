//! Shared by the tests that run the `switchyard` binary as a real process.

// Each test file compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::Command;

/// The service binary without the caller's `SWITCHYARD_*` variables: it refuses unknown ones,
/// and the test environment may carry some.
pub fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    for (name, _) in std::env::vars() {
        if name.starts_with("SWITCHYARD_") {
            command.env_remove(name);
        }
    }
    command
}

/// `GET /api/health` on 127.0.0.1:`port`: the whole response.
pub fn health(port: &str) -> String {
    let mut stream = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    stream
        .write_all(b"GET /api/health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}
