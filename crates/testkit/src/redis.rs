//! A real `redis-server` on a free port, and a real Redis Cluster of several, for cluster
//! tests. Debian's `redis-server` package provides them (`.ci/run` installs it; sharded pub/sub
//! needs 7.0 or later); a machine without it fails the test, never skips it.

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
        RedisServer::start_with(free_port(), &[])
    }

    fn start_with(port: u16, extra: &[&str]) -> RedisServer {
        let dir =
            std::env::temp_dir().join(format!("switchyard-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating the redis directory");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .args(extra)
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

    /// Kills the server (SIGKILL: clients see their connections drop) and starts a fresh one
    /// on the same port after `down` (an outage of that length; its data is gone, as after
    /// a restart without persistence).
    pub fn restart_after(&mut self, down: Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::thread::sleep(down);
        let fresh = RedisServer::start_with(self.port, &[]);
        let old = std::mem::replace(self, fresh);
        // The old handle's process is gone; its directory is the new one's too.
        std::mem::forget(old);
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

/// A Redis Cluster of real `redis-server`s (cluster mode) on free ports, every slot assigned
/// (`redis-cli --cluster create`). Killed and cleaned up on drop.
pub struct RedisCluster {
    /// Every node, masters first as created (with replicas, failover may change roles).
    pub nodes: Vec<RedisServer>,
    masters: usize,
}

impl RedisCluster {
    /// Three masters, no replicas.
    pub fn start() -> RedisCluster {
        RedisCluster::with_replicas(0)
    }

    /// Three masters with `replicas` replicas each (for failover tests).
    pub fn with_replicas(replicas: usize) -> RedisCluster {
        const MASTERS: usize = 3;
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < MASTERS * (1 + replicas) {
            let port = free_cluster_port();
            if !ports.contains(&port) {
                ports.push(port);
            }
        }
        let nodes: Vec<RedisServer> = ports
            .iter()
            .map(|&port| {
                RedisServer::start_with(
                    port,
                    &[
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        "nodes.conf",
                        "--cluster-node-timeout",
                        "2000",
                        // A replica that never synced cannot be promoted: sync at once rather
                        // than after Redis's default 5 s wait for more replicas.
                        "--repl-diskless-sync-delay",
                        "0",
                    ],
                )
            })
            .collect();
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("running redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster {
            nodes,
            masters: MASTERS,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.ready() {
            assert!(
                Instant::now() < deadline,
                "the redis cluster did not reach cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// `redis-cluster://127.0.0.1:p1,…` with every master as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..self.masters]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// The nodes that are masters now (`CLUSTER NODES`).
    pub fn masters(&self) -> Vec<&RedisServer> {
        self.nodes
            .iter()
            .filter(|n| {
                n.cli(&["CLUSTER", "NODES"])
                    .lines()
                    .any(|l| l.contains("myself") && l.contains("master"))
            })
            .collect()
    }

    /// Every node says `cluster_state:ok` and knows every node and slot, and every replica
    /// has synced with its master (so a failover can promote it).
    fn ready(&self) -> bool {
        self.nodes.iter().all(|n| {
            n.cli(&["CLUSTER", "INFO"])
                .lines()
                .any(|l| l.trim() == "cluster_state:ok")
                && n.cli(&["CLUSTER", "NODES"]).lines().count() == self.nodes.len()
                && !n
                    .cli(&["INFO", "replication"])
                    .lines()
                    .any(|l| l.trim() == "master_link_status:down")
        })
    }
}

/// A free port whose cluster bus port (port + 10000) is free too.
fn free_cluster_port() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding port 0")
        .port()
}
