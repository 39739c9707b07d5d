//! Redis Cluster: the `redis-cluster://` URL, the masters and the slots they own
//! (`CLUSTER SLOTS`), and one client per master. Depends on `naming` only.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use redis::{
    AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion,
    Value,
};

use crate::naming::SLOTS;

/// The schemes that select cluster mode.
pub(crate) const SCHEMES: [&str; 2] = ["redis-cluster://", "rediss-cluster://"];

/// Whether `url` names a Redis Cluster rather than one Redis.
pub(crate) fn is_cluster_url(url: &str) -> bool {
    SCHEMES.iter().any(|s| url.starts_with(s))
}

/// Why the cluster could not be used.
#[derive(Debug)]
pub(crate) enum DiscoveryError {
    /// The URL does not parse.
    Url(String),
    /// No seed answered `CLUSTER SLOTS`.
    Unreachable(String),
    /// A seed answered, but runs without `cluster-enabled yes`.
    NotCluster,
    /// The cluster answered, but some slots have no master.
    Incomplete(String),
}

/// Where a master listens: `host:port`.
pub(crate) type Addr = Arc<str>;

/// Which master owns each slot.
pub(crate) struct Topology {
    masters: Vec<Addr>,
    /// Index into `masters`, per slot.
    owner: Vec<u16>,
}

impl Topology {
    pub(crate) fn master(&self, slot: u16) -> &Addr {
        &self.masters[usize::from(self.owner[usize::from(slot)])]
    }

    pub(crate) fn masters(&self) -> &[Addr] {
        &self.masters
    }
}

/// A Redis Cluster: its seeds, its current topology and a client per master.
pub(crate) struct Cluster {
    /// Connection settings shared by every node (credentials, TLS, RESP3); only the address
    /// differs.
    base: ConnectionInfo,
    seeds: Vec<Addr>,
    timeout: Duration,
    topology: RwLock<Arc<Topology>>,
    clients: Mutex<HashMap<Addr, redis::Client>>,
    /// Serialises refreshes, so a burst of redirections asks the cluster once.
    refreshing: tokio::sync::Mutex<()>,
}

impl Cluster {
    /// Parses the URL and discovers the masters through the first seed that answers.
    pub(crate) async fn connect(url: &str, timeout: Duration) -> Result<Cluster, DiscoveryError> {
        let (base, seeds) = parse(url)?;
        let cluster = Cluster {
            base,
            seeds,
            timeout,
            topology: RwLock::new(Arc::new(Topology {
                masters: Vec::new(),
                owner: Vec::new(),
            })),
            clients: Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
        };
        let topology = cluster.discover().await?;
        *cluster.topology.write() = Arc::new(topology);
        Ok(cluster)
    }

    pub(crate) fn topology(&self) -> Arc<Topology> {
        self.topology.read().clone()
    }

    /// Asks the cluster again which master owns which slot (after a redirection or a lost
    /// connection). Concurrent callers share one refresh. Keeps the old topology when no node
    /// answers.
    pub(crate) async fn refresh(&self) {
        let Ok(_guard) = self.refreshing.try_lock() else {
            // Another caller is refreshing now: its answer is as fresh as ours would be.
            let _ = self.refreshing.lock().await;
            return;
        };
        match self.discover().await {
            Ok(topology) => {
                let current = self.topology();
                if topology.owner != current.owner || topology.masters != current.masters {
                    tracing::info!(masters = ?topology.masters, "redis cluster topology changed");
                }
                *self.topology.write() = Arc::new(topology);
            }
            Err(error) => {
                tracing::warn!(?error, "cannot refresh the redis cluster topology");
            }
        }
    }

    /// The client of one master (RESP3, the URL's credentials and TLS settings).
    pub(crate) fn client(&self, addr: &Addr) -> redis::RedisResult<redis::Client> {
        if let Some(client) = self.clients.lock().get(addr) {
            return Ok(client.clone());
        }
        let (host, port) = split_addr(addr).ok_or_else(|| {
            redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "bad cluster node address",
                addr.to_string(),
            ))
        })?;
        let address = match self.base.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        let client = redis::Client::open(self.base.clone().set_addr(address))?;
        self.clients.lock().insert(addr.clone(), client.clone());
        Ok(client)
    }

    /// Asks the known masters, then the seeds, for the slot map; the first answer wins.
    async fn discover(&self) -> Result<Topology, DiscoveryError> {
        let mut candidates: Vec<Addr> = self.topology.read().masters.clone();
        for seed in &self.seeds {
            if !candidates.contains(seed) {
                candidates.push(seed.clone());
            }
        }
        let mut not_cluster = false;
        let mut failures = Vec::new();
        for addr in &candidates {
            match self.slots_from(addr).await {
                Ok(topology) => return topology,
                Err(error) if error.to_string().contains("cluster support disabled") => {
                    not_cluster = true;
                }
                Err(error) => failures.push(format!("{addr}: {error}")),
            }
        }
        if not_cluster {
            return Err(DiscoveryError::NotCluster);
        }
        Err(DiscoveryError::Unreachable(failures.join("; ")))
    }

    /// One node's answer to `CLUSTER SLOTS`. The outer error is the node's; the inner one is
    /// about what it answered.
    async fn slots_from(
        &self,
        addr: &Addr,
    ) -> redis::RedisResult<Result<Topology, DiscoveryError>> {
        let client = self.client(addr)?;
        // A master that is gone must not hold up a refresh for long.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout.min(Duration::from_secs(3))))
            .set_response_timeout(Some(self.timeout));
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let answer: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut connection)
            .await?;
        let host = split_addr(addr).map(|(host, _)| host).unwrap_or_default();
        Ok(parse_slots(&answer, &host))
    }
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replicas…], …]`. An empty host means
/// "the address you reached me at".
fn parse_slots(answer: &Value, asked_host: &str) -> Result<Topology, DiscoveryError> {
    let bad = || DiscoveryError::Incomplete("unexpected CLUSTER SLOTS answer".to_string());
    let Value::Array(ranges) = answer else {
        return Err(bad());
    };
    let mut masters: Vec<Addr> = Vec::new();
    let mut owner = vec![u16::MAX; SLOTS];
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err(bad());
        };
        let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return Err(bad());
        };
        let host = match master.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            _ => return Err(bad()),
        };
        let host = if host.is_empty() || host == "?" {
            asked_host.to_string()
        } else {
            host
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return Err(bad());
        };
        let addr: Addr = join_addr(&host, *port).into();
        let index = match masters.iter().position(|m| *m == addr) {
            Some(index) => index,
            None => {
                masters.push(addr);
                masters.len() - 1
            }
        };
        let range = usize::try_from(*start).map_err(|_| bad())?
            ..=usize::try_from(*end).map_err(|_| bad())?;
        for slot in range {
            *owner.get_mut(slot).ok_or_else(bad)? = index as u16;
        }
    }
    if let Some(slot) = owner.iter().position(|o| *o == u16::MAX) {
        return Err(DiscoveryError::Incomplete(format!(
            "slot {slot} has no master (is the cluster fully set up? `CLUSTER INFO` should say \
             cluster_state:ok)"
        )));
    }
    Ok(Topology { masters, owner })
}

/// Parses `redis-cluster://[user:password@]host:port,host:port[/][?query]` (or
/// `rediss-cluster://` for TLS) into the connection settings of its first seed and the list of
/// seeds.
fn parse(url: &str) -> Result<(ConnectionInfo, Vec<Addr>), DiscoveryError> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis-cluster://") {
        ("redis", rest)
    } else if let Some(rest) = url.strip_prefix("rediss-cluster://") {
        ("rediss", rest)
    } else {
        return Err(DiscoveryError::Url(
            "a cluster URL starts with redis-cluster:// or rediss-cluster://".to_string(),
        ));
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((authority, path)) => (authority, path),
        None => (rest, ""),
    };
    if !path.is_empty() && path != "0" {
        return Err(DiscoveryError::Url(
            "Redis Cluster has only database 0; the URL may not name another".to_string(),
        ));
    }
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let mut seeds: Vec<Addr> = Vec::new();
    let mut first = None;
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(DiscoveryError::Url(
                "an empty host in the seed list".to_string(),
            ));
        }
        let single = format!(
            "{scheme}://{}{host}{}",
            userinfo.map(|u| format!("{u}@")).unwrap_or_default(),
            query.map(|q| format!("?{q}")).unwrap_or_default()
        );
        let info = single
            .as_str()
            .into_connection_info()
            .map_err(|e| DiscoveryError::Url(format!("seed {host:?}: {e}")))?;
        let addr: Addr = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                join_addr(host, i64::from(*port)).into()
            }
            _ => return Err(DiscoveryError::Url(format!("seed {host:?} is not TCP"))),
        };
        if !seeds.contains(&addr) {
            seeds.push(addr);
        }
        first.get_or_insert(info);
    }
    let first = first.ok_or_else(|| DiscoveryError::Url("no seed host".to_string()))?;
    // RESP3 delivers pub/sub messages as pushes on an ordinary multiplexed connection.
    let resp3 = first
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    Ok((first.set_redis_settings(resp3), seeds))
}

fn join_addr(host: &str, port: i64) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

fn split_addr(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_parse_into_seeds() {
        let (info, seeds) =
            parse("redis-cluster://user:pw@127.0.0.1:7000,localhost:7001,[::1]:7002").unwrap();
        assert_eq!(
            seeds.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            ["127.0.0.1:7000", "localhost:7001", "[::1]:7002"]
        );
        assert_eq!(info.redis_settings().password(), Some("pw"));
        assert_eq!(info.redis_settings().username(), Some("user"));
        assert!(matches!(info.addr(), ConnectionAddr::Tcp(_, 7000)));
        let (info, seeds) = parse("rediss-cluster://h1:1,h2:2/").unwrap();
        assert_eq!(seeds.len(), 2);
        assert!(matches!(info.addr(), ConnectionAddr::TcpTls { .. }));
        assert_eq!(split_addr("[::1]:7002"), Some(("::1".to_string(), 7002)));
    }

    #[test]
    fn bad_cluster_urls_are_refused() {
        for url in [
            "redis://h:1",
            "redis-cluster://",
            "redis-cluster://h:1,,h:2",
            "redis-cluster://h:1/3",
            "redis-cluster://h:notaport",
        ] {
            assert!(
                matches!(parse(url), Err(DiscoveryError::Url(_))),
                "{url} was accepted"
            );
        }
    }

    #[test]
    fn slot_maps_must_cover_every_slot() {
        let node = |port| Value::Array(vec![Value::BulkString(b"".to_vec()), Value::Int(port)]);
        let range =
            |start, end, port| Value::Array(vec![Value::Int(start), Value::Int(end), node(port)]);
        let full = Value::Array(vec![range(0, 9999, 1), range(10000, 16383, 2)]);
        let topology = parse_slots(&full, "10.1.1.1").unwrap();
        assert_eq!(&**topology.master(0), "10.1.1.1:1");
        assert_eq!(&**topology.master(16383), "10.1.1.1:2");
        assert_eq!(topology.masters().len(), 2);
        let partial = Value::Array(vec![range(0, 9999, 1)]);
        assert!(matches!(
            parse_slots(&partial, "h"),
            Err(DiscoveryError::Incomplete(_))
        ));
    }
}
