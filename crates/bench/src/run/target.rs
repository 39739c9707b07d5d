//! The target under test, resolved from the flags: a plain SignalR server (the peer), a
//! cluster of nodes on a Redis, or one service; the processes the tool starts for it, where
//! clients connect (through an app server in Default mode), where REST calls go, and which
//! processes are "the service" in the report.

use std::str::FromStr;

use switchyard_auth::ConnectionString;

use super::RunError;
use crate::children::Children;
use crate::cluster::{Node, Probe, Redis};
use crate::procstat;
use crate::scenario::{Endpoint, RestTarget, RunArgs, Scenario};

/// The target under test, resolved.
pub(super) struct Target {
    pub(super) name: String,
    pub(super) mode: &'static str,
    pub(super) endpoint: Endpoint,
    pub(super) rest: Option<RestTarget>,
    /// The processes whose CPU/memory is "the service" in the report (their sum), and in a
    /// cluster, Redis.
    pub(super) probe: Probe,
    pub(super) app_pid: Option<u32>,
    /// `n1` / `all`: where REST calls enter, in a cluster.
    pub(super) rest_nodes: String,
    pub(super) _children: Children,
}

impl Target {
    pub(super) fn clustered(&self) -> bool {
        self.probe.cluster
    }
}

/// The nodes, their Redis, the access key and the first node's connection string.
type ClusterTarget = (Vec<Node>, Redis, String, String);

/// The nodes of the target as `--nodes`, `--client-endpoints` or `--redis-url` name them;
/// `None` for the single service of `--service-bin` / `--connection-string` without Redis.
fn cluster_nodes(
    args: &RunArgs,
    children: &mut Children,
) -> Result<Option<ClusterTarget>, RunError> {
    let count = match (args.nodes, args.client_endpoints.len(), &args.redis_url) {
        (Some(n), _, _) => n,
        (None, 0, None) => return Ok(None),
        (None, 0, Some(_)) => 1,
        (None, n, _) => n as u32,
    };
    let redis =
        match &args.redis_url {
            Some(url) => Redis {
                url: url.clone(),
                pid: local_port_of(url).and_then(procstat::listener_pid),
            },
            None if args.nodes.is_some() => {
                let started = children.start_redis()?;
                Redis {
                    url: started.value,
                    pid: Some(started.pid),
                }
            }
            None => return Err(RunError(
                "--client-endpoints: name the cluster's Redis with --redis-url too (its cost is \
                 what a cluster run measures)"
                    .into(),
            )),
        };
    let mut nodes = Vec::new();
    let mut key: Option<String> = None;
    let mut first_cs = args.connection_string.clone();
    match (&args.service_bin, &args.connection_string) {
        (Some(bin), _) if args.client_endpoints.is_empty() => {
            for i in 1..=count {
                let name = format!("n{i}");
                let started = children.start_node(bin, &redis.url, &name)?;
                let cs = ConnectionString::from_str(&started.value)
                    .map_err(|e| RunError(format!("node {name}'s connection string: {e}")))?;
                let node_key = cs.access_key.clone().unwrap_or_default();
                first_cs.get_or_insert_with(|| started.value.clone());
                if key.get_or_insert_with(|| node_key.clone()) != &node_key {
                    return Err(RunError(
                        "the started nodes print different access keys".into(),
                    ));
                }
                nodes.push(Node {
                    name,
                    url: cs.client_base_url().to_string(),
                    pid: Some(started.pid),
                });
            }
        }
        (_, Some(cs)) => {
            let cs = ConnectionString::from_str(cs)
                .map_err(|e| RunError(format!("connection string: {e}")))?;
            let urls: Vec<String> = if args.client_endpoints.is_empty() {
                vec![cs.client_base_url().to_string()]
            } else {
                args.client_endpoints.clone()
            };
            for (i, url) in urls.iter().enumerate() {
                let parsed = url::Url::parse(url.trim())
                    .map_err(|e| RunError(format!("--client-endpoints {url}: {e}")))?;
                let url = parsed.to_string();
                let url = if url.ends_with('/') {
                    url
                } else {
                    format!("{url}/")
                };
                nodes.push(Node {
                    name: format!("n{}", i + 1),
                    pid: local_port_of(&url).and_then(procstat::listener_pid),
                    url,
                });
            }
            if nodes.len() == 1 && args.service_pid.is_some() {
                nodes[0].pid = args.service_pid;
            }
        }
        (None, None) => {
            return Err(RunError(
                "--redis-url names the Redis of a service: give the service too".into(),
            ))
        }
        (Some(_), None) => unreachable!("client endpoints require a connection string"),
    }
    let key = key.or_else(|| {
        args.connection_string
            .as_deref()
            .and_then(|cs| ConnectionString::from_str(cs).ok())
            .and_then(|cs| cs.access_key)
    });
    let key = key.ok_or_else(|| {
        RunError("the connection string has no AccessKey (needed to sign client tokens)".into())
    })?;
    Ok(Some((nodes, redis, key, first_cs.unwrap_or_default())))
}

/// REST bases for `--rest-node` (`all`, or a 1-based node number) over `nodes`.
fn rest_bases(rest_node: &str, nodes: &[Node]) -> Result<(Vec<String>, String), RunError> {
    if rest_node.eq_ignore_ascii_case("all") {
        return Ok((nodes.iter().map(|n| n.url.clone()).collect(), "all".into()));
    }
    match rest_node.parse::<usize>() {
        Ok(i) if (1..=nodes.len()).contains(&i) => {
            Ok((vec![nodes[i - 1].url.clone()], nodes[i - 1].name.clone()))
        }
        _ => Err(RunError(format!(
            "--rest-node {rest_node}: a node number from 1 to {} or `all`",
            nodes.len()
        ))),
    }
}

pub(super) fn resolve_target(scenario: Scenario, args: &RunArgs) -> Result<Target, RunError> {
    let mut children = Children::default();
    let name = |default: &str| {
        args.target_name
            .clone()
            .unwrap_or_else(|| default.to_owned())
    };
    // A plain SignalR server (the peer).
    if args.is_peer() {
        let (url, pid) = match (&args.peer_url, &args.peer_bin) {
            (Some(url), _) => (url.trim_end_matches('/').to_owned(), args.peer_pid),
            (None, Some(bin)) => {
                let started = children.start_peer(bin, &args.hub_for(scenario))?;
                (started.value, Some(started.pid))
            }
            (None, None) => {
                let started = children.start_floor(&args.hub_for(scenario))?;
                (started.value, Some(started.pid))
            }
        };
        let pid = pid.or_else(|| local_port_of(&url).and_then(procstat::listener_pid));
        let node = Node {
            name: "peer".into(),
            url: format!("{url}/"),
            pid,
        };
        return Ok(Target {
            name: name(if args.floor { "floor" } else { "peer" }),
            mode: "direct",
            rest: Some(RestTarget {
                bases: vec![format!("{url}/")],
                access_key: None,
            }),
            endpoint: Endpoint::Hub { url },
            probe: Probe::new(vec![node], None),
            app_pid: None,
            rest_nodes: String::new(),
            _children: children,
        });
    }
    // A cluster: several nodes (or one) on a Redis.
    if let Some((nodes, redis, access_key, first_cs)) = cluster_nodes(args, &mut children)? {
        let (bases, rest_nodes) = rest_bases(&args.rest_node, &nodes)?;
        let rest = Some(RestTarget {
            bases,
            access_key: Some(access_key.clone()),
        });
        let probe = Probe::new(nodes.clone(), Some(redis));
        // Default mode: one app server on the first node's connection string.
        let bases = nodes.iter().map(|n| n.url.clone()).collect();
        let (mode, endpoint, app_pid) =
            clients_of(scenario, args, &mut children, &first_cs, bases, access_key)?;
        return Ok(Target {
            name: name("switchyard"),
            mode,
            endpoint,
            rest,
            probe,
            app_pid,
            rest_nodes,
            _children: children,
        });
    }
    let (connection_string, mut service_pid) = match (&args.connection_string, &args.service_bin)
    {
        (Some(cs), _) => (cs.clone(), args.service_pid),
        (None, Some(bin)) => {
            let started = children.start_service(bin)?;
            (started.value, Some(started.pid))
        }
        (None, None) => {
            return Err(RunError(
                "name the service with --connection-string \"Endpoint=…;AccessKey=…;Version=1.0;\" (or start one with --service-bin, or test a peer with --peer-url/--peer-bin)".to_owned(),
            ))
        }
    };
    let cs = ConnectionString::from_str(&connection_string)
        .map_err(|e| RunError(format!("connection string: {e}")))?;
    let access_key = cs.access_key.clone().ok_or_else(|| {
        RunError("the connection string has no AccessKey (needed to sign client tokens)".into())
    })?;
    if service_pid.is_none() {
        service_pid = local_port_of(cs.base_url().as_str()).and_then(procstat::listener_pid);
    }
    let rest = Some(RestTarget {
        bases: vec![cs.server_base_url().to_string()],
        access_key: Some(access_key.clone()),
    });
    let probe = Probe::new(
        vec![Node {
            name: "service".into(),
            url: cs.base_url().to_string(),
            pid: service_pid,
        }],
        None,
    );
    let bases = vec![cs.client_base_url().to_string()];
    let (mode, endpoint, app_pid) = clients_of(
        scenario,
        args,
        &mut children,
        &connection_string,
        bases,
        access_key,
    )?;
    Ok(Target {
        name: name("switchyard"),
        mode,
        endpoint,
        rest,
        probe,
        app_pid,
        rest_nodes: String::new(),
        _children: children,
    })
}

/// Where Switchyard's clients connect: through an app server on `connection_string`
/// (Default mode; the mode, its endpoint and the app server's pid) or straight at the
/// service's `bases` (serverless).
fn clients_of(
    scenario: Scenario,
    args: &RunArgs,
    children: &mut Children,
    connection_string: &str,
    bases: Vec<String>,
    access_key: String,
) -> Result<(&'static str, Endpoint, Option<u32>), RunError> {
    if scenario.needs_app_server() {
        let (url, app_pid) = app_server(scenario, args, connection_string, children)?;
        // The app server's negotiate redirects to the one node it knows; on several nodes
        // clients go straight to node g mod N instead (a token signed by the key, as the
        // redirect's), as a load balancer in front of the nodes would spread them.
        let endpoint = if bases.len() > 1 {
            Endpoint::Service { bases, access_key }
        } else {
            Endpoint::Hub { url }
        };
        Ok(("default", endpoint, app_pid))
    } else {
        Ok(("serverless", Endpoint::Service { bases, access_key }, None))
    }
}

/// The app server of a Default-mode run: `--app-url`, or one the tool starts.
fn app_server(
    scenario: Scenario,
    args: &RunArgs,
    connection_string: &str,
    children: &mut Children,
) -> Result<(String, Option<u32>), RunError> {
    Ok(match &args.app_url {
        Some(url) => (
            url.trim_end_matches('/').to_owned(),
            args.app_pid
                .or_else(|| local_port_of(url).and_then(procstat::listener_pid)),
        ),
        None => {
            let exe =
                std::env::current_exe().map_err(|e| RunError(format!("own executable: {e}")))?;
            let started = children.start_app_server(
                &exe,
                connection_string,
                &args.hub_for(scenario),
                args.server_connections,
                args.stateful_reconnect,
            )?;
            (started.value, Some(started.pid))
        }
    })
}

/// The port of `url` if it names this machine (a loopback address or `localhost`): only
/// then can the process behind it be found in /proc.
pub(super) fn local_port_of(url: &str) -> Option<u16> {
    let url = url::Url::parse(url).ok()?;
    let local = match url.host()? {
        // `redis://127.0.0.1:6379` (a scheme the URL standard does not know) keeps its host
        // as text.
        url::Host::Domain(name) => {
            name.eq_ignore_ascii_case("localhost")
                || name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    };
    local.then(|| url.port_or_known_default()).flatten()
}

/// Where clients connect, for messages.
pub(super) fn describe(endpoint: &Endpoint) -> String {
    match endpoint {
        Endpoint::Service { bases, .. } => bases
            .iter()
            .map(|base| format!("{base}client/"))
            .collect::<Vec<_>>()
            .join(", "),
        Endpoint::Hub { url } => url.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ports() {
        assert_eq!(local_port_of("http://127.0.0.1:8080/"), Some(8080));
        assert_eq!(local_port_of("redis://127.0.0.1:6379"), Some(6379));
        assert_eq!(local_port_of("redis://localhost:6380/0"), Some(6380));
        assert_eq!(local_port_of("http://[::1]:81"), Some(81));
        assert_eq!(local_port_of("redis://10.0.0.1:6379"), None);
        assert_eq!(local_port_of("redis://example.com:6379"), None);
    }
}
