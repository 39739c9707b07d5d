//! What the coordinator reads from the target at each sampling instant: every node's
//! process (CPU, memory) and, in a cluster, every node's backplane counters (`/metrics`) and
//! the Redis behind them (its process from `/proc`, its counters from `redis-cli INFO`).

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use switchyard_capacity::report::{NodeUsage, ProcessUsage, RedisUsage};

use crate::procstat::{self, Sample};

/// One service node of the target.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    /// Base URL, ending with `/`.
    pub url: String,
    pub pid: Option<u32>,
}

/// The Redis of a cluster.
#[derive(Debug, Clone)]
pub struct Redis {
    pub url: String,
    pub pid: Option<u32>,
}

/// Reads the target: the nodes (one for a single service) and, in a cluster, Redis.
pub struct Probe {
    pub nodes: Vec<Node>,
    pub redis: Option<Redis>,
    /// Scrape `/metrics` and Redis (cluster runs only: a single node is read from `/proc`
    /// alone, as before).
    pub cluster: bool,
    pub http: reqwest::Client,
}

/// Redis's own counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RedisCounters {
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub commands: u64,
    pub publish_calls: u64,
    /// `used_cpu_user` + `used_cpu_sys` (`INFO cpu`: getrusage, microsecond precision,
    /// where /proc counts 10 ms ticks).
    pub cpu_seconds: f64,
}

/// A node's `switchyard_backplane_messages_total` by kind at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Backplane {
    pub published: u64,
    pub received: u64,
}

/// Everything read at one instant.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub nodes: Vec<Option<Sample>>,
    pub backplane: Vec<Option<Backplane>>,
    pub redis_process: Option<Sample>,
    pub redis: Option<RedisCounters>,
    pub at: std::time::Instant,
}

impl Probe {
    pub fn new(nodes: Vec<Node>, redis: Option<Redis>) -> Probe {
        let cluster = nodes.len() > 1 || redis.is_some();
        Probe {
            nodes,
            redis,
            cluster,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(3))
                .build()
                .unwrap_or_default(),
        }
    }

    pub async fn snapshot(&self) -> Snapshot {
        let at = std::time::Instant::now();
        let nodes: Vec<Option<Sample>> = self
            .nodes
            .iter()
            .map(|n| n.pid.and_then(procstat::sample))
            .collect();
        let redis_process = self
            .redis
            .as_ref()
            .and_then(|r| r.pid)
            .and_then(procstat::sample);
        let mut backplane = Vec::new();
        let mut redis = None;
        if self.cluster {
            // All nodes at once: one busy node must not delay the others' readings.
            let reads: Vec<_> = self
                .nodes
                .iter()
                .map(|node| tokio::spawn(backplane_of(self.http.clone(), node.url.clone())))
                .collect();
            for read in reads {
                backplane.push(read.await.ok().flatten());
            }
            if let Some(r) = &self.redis {
                let url = r.url.clone();
                redis = tokio::task::spawn_blocking(move || redis_counters(&url).ok())
                    .await
                    .ok()
                    .flatten();
            }
        }
        Snapshot {
            nodes,
            backplane,
            redis_process,
            redis,
            at,
        }
    }
}

/// Waits until every node holds an app-server connection (`switchyard_server_connections`
/// in its `/metrics`), polling every 100 ms for at most `within`; the counts per node.
/// The run's one app server knows the first node only: the others ask it (target pings
/// after their presence heartbeat) to connect to them, and until it has, a client there is
/// refused or redirected to another node, which would skew the run's spread.
pub async fn wait_for_app_servers(probe: &Probe, within: Duration) -> Result<Vec<u64>, String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let mut counts = Vec::new();
        for node in &probe.nodes {
            counts.push(server_connections_of(&probe.http, &node.url).await);
        }
        if counts.iter().all(|c| c.is_some_and(|c| c > 0)) {
            return Ok(counts.into_iter().flatten().collect());
        }
        if tokio::time::Instant::now() >= deadline {
            let seen: Vec<String> = probe
                .nodes
                .iter()
                .zip(&counts)
                .map(|(node, count)| match count {
                    Some(c) => format!("{} {c}", node.name),
                    None => format!("{} unreadable", node.name),
                })
                .collect();
            return Err(format!(
                "after {within:?} not every node holds an app-server connection ({}): the \
                 nodes ask the app server connected to the first one to connect to them too \
                 (target pings); an app server that ignores them or caps its connections \
                 leaves the others' clients unserved",
                seen.join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A node's `switchyard_client_connections` now.
pub async fn client_connections_of(http: &reqwest::Client, base: &str) -> Option<u64> {
    let text = http
        .get(format!("{base}metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    Some(parse_client_connections(&text))
}

/// `switchyard_client_connections` summed over its transports.
pub fn parse_client_connections(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("switchyard_client_connections")?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once('}')?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.trim().parse::<f64>().ok()
        })
        .sum::<f64>() as u64
}

/// Whether a node answers `/api/health` without `x-switchyard-health: degraded` (its
/// backplane answers).
pub async fn healthy(http: &reqwest::Client, base: &str) -> bool {
    match http.get(format!("{base}api/health")).send().await {
        Ok(response) => {
            response.status().is_success()
                && !response.headers().contains_key("x-switchyard-health")
        }
        Err(_) => false,
    }
}

/// Whether a node holds an app-server connection (`switchyard_server_connections` > 0).
pub async fn serves_app_server(http: &reqwest::Client, base: &str) -> bool {
    server_connections_of(http, base)
        .await
        .is_some_and(|c| c > 0)
}

async fn server_connections_of(http: &reqwest::Client, base: &str) -> Option<u64> {
    parse_server_connections(&metrics_of(http, base).await?)
}

/// A node's `/metrics` text (`base` ends with `/`).
async fn metrics_of(http: &reqwest::Client, base: &str) -> Option<String> {
    http.get(format!("{base}metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()
}

/// `switchyard_server_connections` (app-server connections after their handshake, every
/// hub) from `/metrics`.
pub fn parse_server_connections(metrics: &str) -> Option<u64> {
    metrics.lines().find_map(|line| {
        let value = line.strip_prefix("switchyard_server_connections ")?;
        Some(value.trim().parse::<f64>().ok()? as u64)
    })
}

/// A node's backplane counters from its `/metrics`.
async fn backplane_of(http: reqwest::Client, base: String) -> Option<Backplane> {
    parse_backplane(&metrics_of(&http, &base).await?)
}

impl Snapshot {
    /// The nodes' processes as one: CPU and memory summed (`None` when any node could not be
    /// read, so a node that died does not pass for a cheap one).
    pub fn service(&self) -> Option<Sample> {
        let mut nodes = self.nodes.iter();
        let mut sum = (*nodes.next()?)?;
        for node in nodes {
            let node = (*node)?;
            sum.cpu_seconds += node.cpu_seconds;
            sum.rss_kb += node.rss_kb;
            sum.hwm_kb += node.hwm_kb;
        }
        Some(sum)
    }
}

/// Redis between two snapshots, with `messages_sent` into the service meanwhile.
pub fn redis_usage(a: &Snapshot, b: &Snapshot, messages_sent: u64) -> Option<RedisUsage> {
    let (x, y) = (a.redis?, b.redis?);
    let process = match (&a.redis_process, &b.redis_process) {
        (Some(p), Some(q)) => Some(procstat::usage(p, q)),
        _ => None,
    };
    let per = |v: f64| (messages_sent > 0).then(|| v / messages_sent as f64);
    let cpu_seconds = (y.cpu_seconds - x.cpu_seconds).max(0.0);
    let net_input_bytes = y.net_input_bytes.saturating_sub(x.net_input_bytes);
    let net_output_bytes = y.net_output_bytes.saturating_sub(x.net_output_bytes);
    let publish_calls = y.publish_calls.saturating_sub(x.publish_calls);
    Some(RedisUsage {
        seconds: b.at.duration_since(a.at).as_secs_f64(),
        cpu_seconds,
        cpu_us_per_message: per(cpu_seconds * 1e6),
        process,
        net_input_bytes,
        net_output_bytes,
        commands: y.commands.saturating_sub(x.commands),
        publish_calls,
        messages_sent,
        bytes_per_message: per((net_input_bytes + net_output_bytes) as f64),
        publish_per_message: per(publish_calls as f64),
    })
}

/// Each node over a run: its process from `whole` (the same window as the report's
/// `service`) and its backplane counters from `measured`.
pub fn node_usage(
    probe: &Probe,
    whole: (&Snapshot, &Snapshot),
    measured: Option<(&Snapshot, &Snapshot)>,
    connections: &[u64],
) -> Vec<NodeUsage> {
    probe
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let process: Option<ProcessUsage> = match (whole.0.nodes.get(i), whole.1.nodes.get(i)) {
                (Some(Some(a)), Some(Some(b))) => Some(procstat::usage(a, b)),
                _ => None,
            };
            let counters = measured.and_then(|(a, b)| {
                let (Some(Some(x)), Some(Some(y))) = (a.backplane.get(i), b.backplane.get(i))
                else {
                    return None;
                };
                Some((
                    y.published.saturating_sub(x.published),
                    y.received.saturating_sub(x.received),
                ))
            });
            NodeUsage {
                name: node.name.clone(),
                url: node.url.clone(),
                connections: connections.get(i).copied().unwrap_or(0),
                process,
                backplane_published: counters.map(|c| c.0),
                backplane_received: counters.map(|c| c.1),
            }
        })
        .collect()
}

/// `redis-cli -u URL INFO SECTION`.
pub fn redis_info(url: &str, section: &str) -> Result<String, String> {
    let output = Command::new("redis-cli")
        .args(["-u", url, "--no-auth-warning", "INFO", section])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("redis-cli: {e} (Debian: apt-get install redis-tools)"))?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() || !text.starts_with('#') {
        return Err(format!(
            "redis-cli INFO {section}: {} {}",
            text.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(text)
}

/// Redis's counters now (`INFO stats` and `INFO commandstats`).
pub fn redis_counters(url: &str) -> Result<RedisCounters, String> {
    let stats = parse_info(&redis_info(url, "stats")?);
    let cpu = parse_info(&redis_info(url, "cpu")?);
    let commands = parse_info(&redis_info(url, "commandstats")?);
    let number = |map: &HashMap<String, String>, key: &str| -> u64 {
        map.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    let calls = |key: &str| -> u64 {
        commands
            .get(key)
            .and_then(|v| {
                v.split(',')
                    .find_map(|kv| kv.strip_prefix("calls="))
                    .and_then(|n| n.parse().ok())
            })
            .unwrap_or(0)
    };
    Ok(RedisCounters {
        net_input_bytes: number(&stats, "total_net_input_bytes"),
        net_output_bytes: number(&stats, "total_net_output_bytes"),
        commands: number(&stats, "total_commands_processed"),
        publish_calls: calls("cmdstat_publish") + calls("cmdstat_spublish"),
        cpu_seconds: ["used_cpu_user", "used_cpu_sys"]
            .iter()
            .filter_map(|k| cpu.get(*k).and_then(|v| v.parse::<f64>().ok()))
            .sum(),
    })
}

/// `key:value` lines of an `INFO` answer.
pub fn parse_info(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// `switchyard_backplane_messages_total{kind="published"|"received"}` from `/metrics`.
pub fn parse_backplane(metrics: &str) -> Option<Backplane> {
    // The family is declared before its first copy from the backplane (once a second after
    // the node starts): declared without samples means nothing counted yet.
    let mut found = metrics
        .contains("# TYPE switchyard_backplane_messages ")
        .then(Backplane::default);
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("switchyard_backplane_messages_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once('}') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let entry = found.get_or_insert_with(Backplane::default);
        if labels.contains("kind=\"published\"") {
            entry.published = value as u64;
        } else if labels.contains("kind=\"received\"") {
            entry.received = value as u64;
        }
    }
    found
}

/// The node of client connection `g` among `nodes`.
pub fn node_of(g: u64, nodes: usize) -> usize {
    (g % nodes.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_info_and_commandstats() {
        let stats = "# Stats\r\ntotal_connections_received:7\r\ntotal_commands_processed:1234\r\n\
                     total_net_input_bytes:5000\r\ntotal_net_output_bytes:90000\r\n";
        let map = parse_info(stats);
        assert_eq!(map["total_net_input_bytes"], "5000");
        assert_eq!(map["total_commands_processed"], "1234");
        let commands = "# Commandstats\r\ncmdstat_publish:calls=300,usec=900,usec_per_call=3.00,\
                        rejected_calls=0,failed_calls=0\r\ncmdstat_ping:calls=2,usec=1\r\n";
        let map = parse_info(commands);
        assert!(map["cmdstat_publish"].starts_with("calls=300,"));
    }

    #[test]
    fn reads_backplane_counters() {
        let text = "# HELP switchyard_backplane_messages Messages…\n\
                    # TYPE switchyard_backplane_messages counter\n\
                    switchyard_backplane_messages_total{kind=\"published\"} 120\n\
                    switchyard_backplane_messages_total{kind=\"received\"} 360\n\
                    switchyard_backplane_messages_total{kind=\"decode_errors\"} 0\n";
        assert_eq!(
            parse_backplane(text),
            Some(Backplane {
                published: 120,
                received: 360
            })
        );
        assert_eq!(parse_backplane("switchyard_connections 3\n"), None);
        let declared = "# TYPE switchyard_backplane_messages counter\nswitchyard_connections 3\n";
        assert_eq!(parse_backplane(declared), Some(Backplane::default()));
    }

    #[test]
    fn reads_client_connections() {
        let text = "# TYPE switchyard_client_connections gauge\n\
                    switchyard_client_connections{transport=\"websockets\"} 7\n\
                    switchyard_client_connections{transport=\"longpolling\"} 2\n\
                    switchyard_client_connections_opened_total 40\n";
        assert_eq!(parse_client_connections(text), 9);
        assert_eq!(parse_client_connections("switchyard_connections 3\n"), 0);
    }

    #[test]
    fn reads_server_connections() {
        let text = "# TYPE switchyard_server_connections gauge\n\
                    switchyard_server_connections 5\n\
                    switchyard_server_connections_closed_total{reason=\"closed\"} 2\n";
        assert_eq!(parse_server_connections(text), Some(5));
        assert_eq!(
            parse_server_connections("switchyard_server_connections_closed_total 1\n"),
            None
        );
    }

    fn sample(cpu: f64, rss: u64) -> Sample {
        Sample {
            pid: 1,
            at: std::time::Instant::now(),
            cpu_seconds: cpu,
            system_seconds: cpu / 2.0,
            rss_kb: rss,
            hwm_kb: rss,
        }
    }

    #[test]
    fn sums_nodes_and_divides_redis_by_messages() {
        let a = Snapshot {
            nodes: vec![Some(sample(1.0, 100)), Some(sample(2.0, 200))],
            backplane: vec![],
            redis_process: Some(sample(0.5, 10)),
            redis: Some(RedisCounters {
                net_input_bytes: 1000,
                net_output_bytes: 2000,
                commands: 10,
                publish_calls: 5,
                cpu_seconds: 0.5,
            }),
            at: std::time::Instant::now(),
        };
        let sum = a.service().unwrap();
        assert_eq!((sum.cpu_seconds, sum.rss_kb), (3.0, 300));
        let mut b = a.clone();
        b.redis_process = Some(sample(0.6, 10));
        b.redis = Some(RedisCounters {
            net_input_bytes: 3000,
            net_output_bytes: 8000,
            commands: 110,
            publish_calls: 105,
            cpu_seconds: 0.6,
        });
        let usage = redis_usage(&a, &b, 100).unwrap();
        assert_eq!(usage.publish_calls, 100);
        assert_eq!(usage.publish_per_message, Some(1.0));
        assert_eq!(usage.bytes_per_message, Some(80.0));
        assert!((usage.cpu_us_per_message.unwrap() - 1000.0).abs() < 1e-6);
        assert_eq!(redis_usage(&a, &b, 0).unwrap().publish_per_message, None);
        // A node that cannot be read makes the sum unknown.
        b.nodes[1] = None;
        assert!(b.service().is_none());
        assert_eq!(node_of(4, 3), 1);
    }
}
