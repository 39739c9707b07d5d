//! Processes the tool starts: the service, the app server, the peer. Each prints one line
//! naming where it listens; the rest of its output is drained so it never blocks on a full
//! pipe. All are killed when [`Children`] drops (a signal to this process does not reach
//! them: run under `timeout`, which signals the process group).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

/// How long a child may take to say where it listens.
const START_WAIT: Duration = Duration::from_secs(30);

#[derive(Default)]
pub struct Children {
    processes: Vec<Child>,
    /// Stopped after every process above (Redis outlives the nodes that use it, so they do
    /// not log its loss), with the scratch directories to remove.
    last: Vec<Child>,
    dirs: Vec<std::path::PathBuf>,
}

/// A started child: its pid and the value of its announcement line.
pub struct Started {
    pub pid: u32,
    pub value: String,
}

impl Children {
    /// `switchyard serve --listen 127.0.0.1:0` → the connection string it prints.
    pub fn start_service(&mut self, bin: &Path) -> Result<Started, String> {
        self.start(
            bin,
            &["serve", "--listen", "127.0.0.1:0"],
            "ConnectionString: ",
        )
    }

    /// `switchyard serve --listen 127.0.0.1:0 --redis URL --node-id ID` → its connection
    /// string.
    pub fn start_node(&mut self, bin: &Path, redis_url: &str, id: &str) -> Result<Started, String> {
        self.start(
            bin,
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--redis",
                redis_url,
                "--node-id",
                id,
            ],
            "ConnectionString: ",
        )
        .map_err(|e| format!("node {id}: {e}"))
    }

    /// A node started again after [`Children::kill`]: the same id and port (clients and the
    /// other nodes know it by its address), a new process and instance.
    pub fn restart_node(
        &mut self,
        bin: &Path,
        redis_url: &str,
        id: &str,
        port: u16,
    ) -> Result<Started, String> {
        let listen = format!("127.0.0.1:{port}");
        let args = [
            "serve",
            "--listen",
            &listen,
            "--redis",
            redis_url,
            "--node-id",
            id,
        ];
        // The killed process's port may take a moment to be free again.
        let deadline = std::time::Instant::now() + START_WAIT;
        loop {
            match self.start(bin, &args, "ConnectionString: ") {
                Ok(started) => return Ok(started),
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(format!("node {id} again on port {port}: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// SIGKILL one of the started processes (a node or Redis) and reap it.
    pub fn kill(&mut self, pid: u32) -> Result<(), String> {
        for list in [&mut self.processes, &mut self.last] {
            if let Some(i) = list.iter().position(|c| c.id() == pid) {
                let mut child = list.remove(i);
                let killed = child.kill();
                let _ = child.wait();
                return killed.map_err(|e| format!("kill {pid}: {e}"));
            }
        }
        Err(format!("no started process has pid {pid}"))
    }

    /// `redis-server` on 127.0.0.1 and a free port, without persistence, in a scratch
    /// directory; returns once it answers PING. The value is its `redis://` URL.
    pub fn start_redis(&mut self) -> Result<Started, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port for redis-server: {e}"))?
            .port();
        self.start_redis_on(port)
    }

    /// `redis-server` on `port` (a new one after [`Children::kill`] of the first: the nodes
    /// reconnect to the same address).
    pub fn start_redis_on(&mut self, port: u16) -> Result<Started, String> {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-bench-redis-{}-{port}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !self.dirs.contains(&dir) {
            self.dirs.push(dir.clone());
        }
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            // Room for 64 nodes' publisher and subscriber connections and more.
            .args(["--maxclients", "10000"])
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                format!("start redis-server: {e} (Debian: apt-get install redis-server)")
            })?;
        let pid = child.id();
        self.last.push(child);
        let url = format!("redis://127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + START_WAIT;
        loop {
            if crate::cluster::redis_info(&url, "server").is_ok() {
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "redis-server (pid {pid}) did not answer on port {port} within {START_WAIT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Started { pid, value: url })
    }

    /// `switchyard-bench app-server` against `connection_string` → its base URL.
    pub fn start_app_server(
        &mut self,
        bin: &Path,
        connection_string: &str,
        hub: &str,
        connections: usize,
        allow_stateful_reconnects: bool,
    ) -> Result<Started, String> {
        let connections = connections.to_string();
        let mut args = vec![
            "app-server",
            "--connection-string",
            connection_string,
            "--listen",
            "127.0.0.1:0",
            "--hub",
            hub,
            "--connections",
            &connections,
        ];
        if allow_stateful_reconnects {
            args.push("--allow-stateful-reconnects");
        }
        self.start(bin, &args, "App server listening on ")
    }

    /// A peer (`--listen 127.0.0.1:0 --hub HUB`) → its base URL.
    pub fn start_peer(&mut self, bin: &Path, hub: &str) -> Result<Started, String> {
        self.start(
            bin,
            &["--listen", "127.0.0.1:0", "--hub", hub],
            "Peer listening on ",
        )
    }

    /// The floor (`switchyard-bench floor`, this binary) → its base URL.
    pub fn start_floor(&mut self, hub: &str) -> Result<Started, String> {
        let bin = std::env::current_exe().map_err(|e| format!("this binary's path: {e}"))?;
        self.start(
            &bin,
            &["floor", "--listen", "127.0.0.1:0", "--hub", hub],
            "Peer listening on ",
        )
    }

    fn start(&mut self, bin: &Path, args: &[&str], prefix: &str) -> Result<Started, String> {
        let mut child = Command::new(bin)
            .args(args)
            .env("SWITCHYARD_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("start {}: {e}", bin.display()))?;
        let pid = child.id();
        let out = child.stdout.take().expect("piped");
        self.processes.push(child);
        let line = first_line_with(out, prefix)
            .map_err(|e| format!("{} (pid {pid}): {e}", bin.display()))?;
        Ok(Started {
            pid,
            value: line[prefix.len()..].trim().to_owned(),
        })
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        // In start order: the service before its app server, so the service does not log
        // every server connection's reset.
        for child in self.processes.iter_mut().chain(self.last.iter_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The first line starting with `prefix` (within [`START_WAIT`]); later lines are drained
/// in the background.
fn first_line_with(out: ChildStdout, prefix: &str) -> Result<String, String> {
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            // Nobody listens after the first match: keep draining.
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + START_WAIT;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with(prefix) => return Ok(line),
            Ok(_) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "no line starting with {prefix:?} within {START_WAIT:?}"
                ))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!("exited before printing {prefix:?}"))
            }
        }
    }
}
