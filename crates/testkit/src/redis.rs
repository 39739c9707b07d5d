//! A real `redis-server` on a free port, for cluster tests. Debian's `redis-server` package
//! provides it (`.ci/run` installs it); a machine without it fails the test, never skips it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts `redis-server` on 127.0.0.1 with no persistence and waits until it answers.
    pub fn start() -> RedisServer {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("switchyard-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating the redis directory");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start redis-server ({e}): install Debian's redis-server package \
                     (`apt-get install redis-server`); cluster tests need a real one"
                )
            });
        let server = RedisServer { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.answers() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Runs `redis-cli` against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let output = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("running redis-cli");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    fn answers(&self) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            && self.cli(&["PING"]) == "PONG"
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding port 0")
        .port()
}
