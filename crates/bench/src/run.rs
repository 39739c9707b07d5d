//! The coordinator of a scenario run: sets up the target (service, app server, peer),
//! starts the workers (in this process, or `--workers N` child processes), merges what
//! they report, applies Azure's stop rule after each step, samples the target's CPU and
//! memory, and writes the report, counters and chart.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use switchyard_auth::ConnectionString;
use switchyard_capacity::report::{Cluster, Counts, ProcessUsage, Report, Second, Step};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use crate::children::Children;
use crate::cluster::{self, Node, Probe, Redis, Snapshot};
use crate::procstat::{self, Sample};
use crate::report;
use crate::scenario::{Endpoint, Plan, RestTarget, RunArgs, Scenario, DEFAULT_ROOM_SIZE};
use crate::soak::{self, Outage, PhaseCounts, PhaseMark, RssRow};
use crate::stats::{Bucket, BucketExport, Live};
use crate::worker::{self, instant_at, now_ms, Command, Event};

/// Azure's rule: at most this share of messages may take ≥ 1 s (lost ones count), and at
/// most this share of connections may fail.
const RULE_SHARE: f64 = 0.01;

/// How long a Default-mode cluster run waits for the app server to hold a connection on
/// every node (the nodes ask it within their 1 s heartbeat; it connects in well under 1 s).
const APP_SERVER_WAIT: Duration = Duration::from_secs(30);

/// A worker's final report: steps, seconds, errors.
type Final = (Vec<BucketExport>, Vec<BucketExport>, Vec<(String, u64)>);

/// A run that could not be set up or carried out.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct RunError(pub String);

impl From<String> for RunError {
    fn from(value: String) -> Self {
        RunError(value)
    }
}

/// The target under test, resolved.
struct Target {
    name: String,
    mode: &'static str,
    endpoint: Endpoint,
    rest: Option<RestTarget>,
    /// The processes whose CPU/memory is "the service" in the report (their sum), and in a
    /// cluster, Redis.
    probe: Probe,
    app_pid: Option<u32>,
    /// `n1` / `all`: where REST calls enter, in a cluster.
    rest_nodes: String,
    _children: Children,
}

impl Target {
    fn clustered(&self) -> bool {
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

fn resolve_target(scenario: Scenario, args: &RunArgs) -> Result<Target, RunError> {
    let mut children = Children::default();
    let name = |default: &str| {
        args.target_name
            .clone()
            .unwrap_or_else(|| default.to_owned())
    };
    // A plain SignalR server (the peer).
    if args.peer_url.is_some() || args.peer_bin.is_some() {
        let (url, pid) = match (&args.peer_url, &args.peer_bin) {
            (Some(url), _) => (url.trim_end_matches('/').to_owned(), args.peer_pid),
            (None, Some(bin)) => {
                let started = children.start_peer(bin, &args.hub)?;
                (started.value, Some(started.pid))
            }
            (None, None) => unreachable!(),
        };
        let pid = pid.or_else(|| local_port_of(&url).and_then(procstat::listener_pid));
        let node = Node {
            name: "peer".into(),
            url: format!("{url}/"),
            pid,
        };
        return Ok(Target {
            name: name("peer"),
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
        let (url, app_pid) = app_server(args, connection_string, children)?;
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
                &args.hub,
                args.server_connections,
                args.stateful_reconnect,
            )?;
            (started.value, Some(started.pid))
        }
    })
}

/// The port of `url` if it names this machine (a loopback address or `localhost`): only
/// then can the process behind it be found in /proc.
fn local_port_of(url: &str) -> Option<u16> {
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

/// Checks flags that clap cannot.
fn validate(scenario: Scenario, args: &RunArgs) -> Result<(), RunError> {
    let format = worker::parse_format(&args.protocol)?;
    let transport =
        switchyard_client::connection::Transport::from_str(&args.transport).map_err(|_| {
            RunError(format!(
                "unknown transport '{}' (websockets, serversentevents, longpolling)",
                args.transport
            ))
        })?;
    let nodes = args
        .nodes
        .unwrap_or(1)
        .max(args.client_endpoints.len() as u32);
    if args.nodes == Some(0) || nodes > 64 {
        return Err(RunError("--nodes must be 1–64".into()));
    }
    if args.connections == 0 {
        return Err(RunError("--connections must be at least 1".into()));
    }
    if args.steps == 0 {
        return Err(RunError("--steps must be at least 1".into()));
    }
    if args.workers == 0 || args.workers > 64 {
        return Err(RunError("--workers must be 1–64".into()));
    }
    if args.duration.is_zero() {
        return Err(RunError("--duration must be more than 0".into()));
    }
    if args.send_interval.is_zero() {
        return Err(RunError("--send-interval must be more than 0".into()));
    }
    if args.connect_rate.is_nan() || args.connect_rate <= 0.0 {
        return Err(RunError("--connect-rate must be more than 0".into()));
    }
    if transport == switchyard_client::connection::Transport::ServerSentEvents
        && format == switchyard_hub_protocol::Format::MessagePack
    {
        return Err(RunError(
            "MessagePack is binary and cannot travel over Server-Sent Events: use -p json or another transport".into(),
        ));
    }
    if scenario.is_chat_room() {
        // The profile fixes who posts and how often.
        if args.senders.is_some() || args.steps > 1 || args.groups.is_some() {
            return Err(RunError(format!(
                "{}: the profile fixes the posters (10 % of each room every 11 send \
                 intervals, 20 % every 59): no --senders, --steps or --groups (rooms are \
                 --group-size members, default {DEFAULT_ROOM_SIZE})",
                scenario.name()
            )));
        }
        if args.group_size == Some(0) {
            return Err(RunError("--group-size must be at least 1".into()));
        }
    }
    if soak_enabled(args) {
        if !scenario.is_chat_room() {
            return Err(RunError(
                "--kill-node-every and --restart-redis-at run with chat-room or rest-chat-room \
                 (the soak's traffic)"
                    .into(),
            ));
        }
        if args.service_bin.is_none() || args.nodes.unwrap_or(0) < 2 || args.redis_url.is_some() {
            return Err(RunError(
                "a soak kills and starts the nodes and Redis itself: --service-bin with \
                 --nodes 2 or more, without --redis-url"
                    .into(),
            ));
        }
        if args.rss_every.is_some_and(|d| d.is_zero())
            || args.kill_node_every.is_some_and(|d| d.is_zero())
        {
            return Err(RunError(
                "--rss-every and --kill-node-every must be more than 0".into(),
            ));
        }
    }
    if matches!(scenario, Scenario::SendToGroup | Scenario::RestSendToGroup)
        && args.group_size.is_none()
        && args.groups.is_none()
    {
        return Err(RunError(format!(
            "{} needs --group-size N (Azure's small groups: 10) or --groups N (big groups: 10)",
            scenario.name()
        )));
    }
    if scenario == Scenario::RestJoinLeaveGroup
        && (args.peer_url.is_some() || args.peer_bin.is_some())
    {
        return Err(RunError(
            "rest-join-leave-group needs the REST group API, which the peer does not have".into(),
        ));
    }
    if args.stateful_reconnect {
        if transport != switchyard_client::connection::Transport::WebSockets {
            return Err(RunError(
                "--stateful-reconnect needs WebSockets (the official clients use it there only)"
                    .into(),
            ));
        }
        if soak_enabled(args) {
            return Err(RunError(
                "--stateful-reconnect does not run with a soak (its clients start over)".into(),
            ));
        }
    }
    if !(0.0..=1.0).contains(&args.drop_share) {
        return Err(RunError("--drop-share must be between 0 and 1".into()));
    }
    if let Some(senders) = args.senders {
        if scenario.sends() && senders == 0 {
            return Err(RunError("--senders must be at least 1".into()));
        }
        let one_per_connection = !scenario.is_rest()
            || matches!(
                scenario,
                Scenario::RestSendToConnection | Scenario::RestJoinLeaveGroup
            );
        if one_per_connection && senders > args.connections {
            return Err(RunError(format!(
                "--senders {senders} is more than --connections {}",
                args.connections
            )));
        }
    }
    Ok(())
}

/// Runs `scenario`; the report is written and printed before it returns.
pub async fn run(scenario: Scenario, args: &RunArgs) -> Result<Report, RunError> {
    validate(scenario, args)?;
    let mut target = resolve_target(scenario, args)?;
    let senders = match args.senders {
        _ if !scenario.sends() => 0,
        Some(senders) => senders,
        // Big groups: Azure's guide has 20 senders (every receiver tracks each sender).
        None if scenario == Scenario::SendToGroup && args.groups.is_some() => {
            args.connections.min(20)
        }
        // One caller per group.
        None if scenario == Scenario::RestSendToGroup => match (args.group_size, args.groups) {
            (Some(size), _) => args.connections.div_ceil(size.max(1)),
            (None, groups) => groups.unwrap_or(1).max(1),
        },
        None => scenario.default_senders(args.connections),
    };
    let groups = args.groups.or((matches!(
        scenario,
        Scenario::JoinLeaveGroup | Scenario::RestJoinLeaveGroup
    ) && args.group_size.is_none())
    .then_some(10));
    let mut plan = Plan {
        scenario,
        hub: args.hub.clone(),
        endpoint: target.endpoint.clone(),
        rest: target.rest.clone(),
        transport: args.transport.clone(),
        protocol: args.protocol.clone(),
        connections: args.connections,
        senders,
        steps: if scenario.sends() { args.steps } else { 1 },
        step_seconds: args.duration.as_secs_f64(),
        warmup_seconds: args.warmup.as_secs_f64(),
        drain_seconds: args.drain.as_secs_f64(),
        message_size: args.message_size,
        interval_ms: args.send_interval.as_secs_f64() * 1000.0,
        group_size: args
            .group_size
            .or(scenario.is_chat_room().then_some(DEFAULT_ROOM_SIZE)),
        groups,
        connect_rate: args.connect_rate,
        max_connecting: args.max_connecting,
        source_addresses: args.source_addresses.clone(),
        workers: args.workers,
        worker: 0,
        reconnect: soak_enabled(args),
        stateful_reconnect: args.stateful_reconnect,
        drop_share: args.drop_share,
    };
    if scenario.is_chat_room() {
        plan.senders = plan.posters();
    }
    if target.mode == "default" && target.probe.nodes.len() > 1 {
        let counts = cluster::wait_for_app_servers(&target.probe, APP_SERVER_WAIT).await?;
        if !args.quiet {
            eprintln!("app-server connections per node: {counts:?}");
        }
    }
    let dashboard = match args.dashboard {
        true => {
            let base = target.probe.nodes[0].url.clone();
            let key = target
                .rest
                .as_ref()
                .and_then(|rest| rest.access_key.clone())
                .ok_or_else(|| RunError("--dashboard needs the service's access key".into()))?;
            Some(crate::dashboard::open(&base, &key, &args.hub, args.trace).await?)
        }
        false => None,
    };
    let started_at = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    let snap_before = target.probe.snapshot().await;
    let service_before = snap_before.service();
    let app_before = target.app_pid.and_then(procstat::sample);

    let (events_tx, mut events) = mpsc::unbounded_channel::<(usize, Event)>();
    let workers = start_workers(&plan, events_tx).await?;
    let progress = Progress::new(args.quiet, args.connections);
    let mut counters = match &args.counters {
        Some(path) => Some(
            std::fs::File::create(path)
                .map_err(|e| RunError(format!("--counters {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let mut live: Vec<Live> = vec![Live::default(); workers.len()];

    // 1. Connect phase.
    let connect_deadline = Instant::now()
        + Duration::from_secs_f64(args.connections as f64 / args.connect_rate.max(0.001) + 120.0);
    let mut connected = 0u64;
    let mut failed: Vec<u64> = Vec::new();
    let mut connect = Bucket::empty_step();
    let mut connect_seconds = 0f64;
    let mut waiting = workers.len();
    while waiting > 0 {
        let (index, event) = tokio::select! {
            event = events.recv() => event.ok_or_else(|| RunError("every worker exited".into()))?,
            _ = sleep_until(connect_deadline) => return Err(RunError("connect phase did not finish in time".into())),
        };
        match event {
            Event::Connected {
                connected: c,
                failed: f,
                connect: bucket,
                seconds,
            } => {
                connected += c;
                failed.extend(f);
                connect.merge(&bucket)?;
                connect_seconds = connect_seconds.max(seconds);
                waiting -= 1;
            }
            Event::Live { live: l } => {
                live[index] = l;
                progress.connecting(&sum(&live));
            }
            Event::Failed { error } => return Err(RunError(format!("worker {index}: {error}"))),
            _ => {}
        }
    }
    failed.sort_unstable();
    let snap_connected = target.probe.snapshot().await;
    let service_connected = snap_connected.service();
    let app_connected = target.app_pid.and_then(procstat::sample);
    progress.connected(connected, failed.len() as u64, connect_seconds);
    if connected == 0 {
        return Err(RunError(format!(
            "no connection succeeded; first errors are printed above (target {})",
            describe(&target.endpoint)
        )));
    }

    // 2. Sending: one common timetable.
    let start_ms = now_ms() + 1000.0;
    for w in &workers {
        w.send(Command::Start {
            start_ms,
            connected,
            failed: failed.clone(),
        });
    }
    let steps = plan.steps.max(1);
    let measure_ms = start_ms + plan.warmup_seconds * 1000.0;
    let step_ms = plan.step_seconds * 1000.0;
    // Samples of the target at each step boundary (index 0 = measuring starts).
    let mut service_samples: Vec<Option<Sample>> = Vec::new();
    let mut snapshots: Vec<Snapshot> = Vec::new();
    let mut app_samples: Vec<Option<Sample>> = Vec::new();
    let generator_pids: Vec<u32> = workers.iter().filter_map(WorkerHandle::pid).collect();
    let mut generator_samples: Vec<Option<Sample>> = Vec::new();
    let mut merged_steps: BTreeMap<u64, (Bucket, usize)> = BTreeMap::new();
    let mut finals: Vec<Option<Final>> = vec![None; workers.len()];
    let mut stopped_after: Option<u64> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (notes_tx, mut notes) = mpsc::unbounded_channel::<Note>();
    let mut soak = soak_enabled(args).then(|| {
        Soak::new(
            args,
            &target,
            soak::Window {
                start_ms,
                measure_ms,
                end_ms: measure_ms + step_ms * f64::from(steps),
            },
            notes_tx,
        )
    });
    let mut rss_tick = tokio::time::interval(
        soak.as_ref()
            .map_or(Duration::from_secs(3600), |s| s.rss_every),
    );
    let mut finals_phases: Vec<Vec<PhaseCounts>> = Vec::new();
    progress.sending(plan.warmup_seconds + plan.send_seconds());
    // Workers end by themselves after the drain; this only bounds a stuck one.
    let deadline = instant_at(
        measure_ms + step_ms * f64::from(steps) + plan.drain_seconds * 1000.0 + 60_000.0,
    );
    loop {
        let mut next_sample = measure_ms + step_ms * service_samples.len() as f64;
        if scenario == Scenario::Idle && service_samples.len() == steps as usize {
            // Connections close at the end: sample while they are all still held.
            next_sample -= (step_ms / 2.0).min(1000.0);
        }
        let sampling = service_samples.len() <= steps as usize;
        let chaos_at = soak.as_ref().and_then(Soak::next_at);
        tokio::select! {
            // (The expression is evaluated even when disabled: a time an hour away.)
            _ = sleep_until(instant_at(chaos_at.unwrap_or(now_ms() + 3_600_000.0))), if chaos_at.is_some() => {
                if let Some(soak) = soak.as_mut() {
                    soak.fire(&mut target, &workers)?;
                }
            }
            Some(note) = notes.recv() => {
                if let Some(soak) = soak.as_mut() {
                    soak.note(note, &workers);
                }
            }
            _ = rss_tick.tick(), if soak.is_some() => {
                if let Some(soak) = soak.as_mut() {
                    soak.sample_rss(&target.probe).await;
                }
            }
            _ = sleep_until(deadline) => {
                return Err(RunError("a worker did not finish within a minute after the drain".into()));
            }
            _ = sleep_until(instant_at(next_sample)), if sampling => {
                let snapshot = target.probe.snapshot().await;
                service_samples.push(snapshot.service());
                snapshots.push(snapshot);
                app_samples.push(target.app_pid.and_then(procstat::sample));
                generator_samples.push(procstat::sample_sum(&generator_pids));
            }
            _ = tick.tick() => {
                let total = sum(&live);
                if let Some(file) = counters.as_mut() {
                    let step = current_step(now_ms(), measure_ms, step_ms, steps);
                    let line = report::counters_line(SystemTime::now(), &azure_counters(&total, &plan, step));
                    let _ = writeln!(file, "{line}");
                }
                progress.tick((now_ms() - start_ms) / 1000.0, &total, &plan, measure_ms, step_ms);
            }
            event = events.recv() => {
                let Some((index, event)) = event else {
                    return Err(RunError("every worker stopped before its final report".into()));
                };
                match event {
                    Event::Live { live: l } => live[index] = l,
                    Event::Step { step } => {
                        let entry = merged_steps.entry(step.index).or_insert_with(|| (Bucket::empty_step(), 0));
                        entry.0.merge(&step)?;
                        entry.1 += 1;
                        if entry.1 == workers.len() {
                            let dropped = sum(&live).dropped;
                            let passed = rule_passes(&entry.0, failed.len() as u64 + dropped, args.connections);
                            progress.step_done(step.index, steps, &entry.0, passed);
                            if !passed && stopped_after.is_none() && step.index < u64::from(steps) {
                                stopped_after = Some(step.index);
                                let at_ms = measure_ms + step_ms * step.index as f64;
                                for w in &workers {
                                    w.send(Command::Stop { at_ms });
                                }
                            }
                        }
                    }
                    Event::Sessions { outages } => {
                        if let Some(soak) = soak.as_mut() {
                            soak.outages.extend(outages);
                            soak.sessions += 1;
                            if soak.sessions == workers.len() {
                                soak.settle_marks();
                                for w in &workers {
                                    w.send(Command::Account {
                                        outages: soak.outages.clone(),
                                        phases: soak.marks.clone(),
                                    });
                                }
                            }
                        }
                    }
                    Event::Final { steps, seconds, errors, phases } => {
                        finals_phases.push(phases);
                        finals[index] = Some((steps, seconds, errors));
                        if finals.iter().all(Option::is_some) {
                            break;
                        }
                    }
                    Event::Failed { .. } if finals[index].is_some() => {}
                    Event::Failed { error } => return Err(RunError(format!("worker {index}: {error}"))),
                    Event::Connected { .. } => {}
                }
            }
        }
    }
    progress.finish();
    if let Some(file) = counters.as_mut() {
        let step = current_step(now_ms(), measure_ms, step_ms, steps);
        let line =
            report::counters_line(SystemTime::now(), &azure_counters(&sum(&live), &plan, step));
        let _ = writeln!(file, "{line}");
    }
    let snap_after = target.probe.snapshot().await;
    let service_after = snap_after.service();
    let app_after = target.app_pid.and_then(procstat::sample);
    drop(workers);

    // 3. Merge the finals into the report.
    let mut step_buckets: Vec<Bucket> = (0..steps).map(|_| Bucket::empty_step()).collect();
    let mut second_buckets: Vec<Bucket> = Vec::new();
    let mut errors: BTreeMap<String, u64> = BTreeMap::new();
    for (worker_steps, worker_seconds, worker_errors) in finals.into_iter().flatten() {
        for s in worker_steps {
            if let Some(bucket) = step_buckets.get_mut((s.index as usize).wrapping_sub(1)) {
                bucket.merge(&s)?;
            }
        }
        for s in worker_seconds {
            let i = s.index as usize;
            if second_buckets.len() <= i {
                second_buckets.resize_with(i + 1, Bucket::empty_second);
            }
            second_buckets[i].merge(&s)?;
        }
        for (kind, count) in worker_errors {
            *errors.entry(kind).or_insert(0) += count;
        }
    }
    let dropped = sum(&live).dropped;
    if scenario == Scenario::ConnectRate {
        // The measurement is the connect phase itself.
        step_buckets[0] = connect;
        step_buckets[0].dropped = dropped;
    }
    let ran_steps = stopped_after.unwrap_or(u64::from(steps)) as usize;
    let mut report_steps = Vec::new();
    // Drops before the first step (warm-up) are in the live total, not in any step.
    let step_drops: u64 = step_buckets.iter().take(ran_steps).map(|b| b.dropped).sum();
    let mut dropped_so_far = dropped.saturating_sub(step_drops);
    for (i, bucket) in step_buckets.iter().enumerate().take(ran_steps) {
        let index = i + 1;
        dropped_so_far += bucket.dropped;
        let usage = |samples: &[Option<Sample>]| match (samples.get(i), samples.get(i + 1)) {
            (Some(Some(a)), Some(Some(b))) => Some(procstat::usage(a, b)),
            _ => None,
        };
        let connect_phase = |a: &Option<Sample>, b: &Option<Sample>| match (a, b) {
            (Some(a), Some(b)) => Some(procstat::usage(a, b)),
            _ => None,
        };
        // connect-rate measures the connect phase: its usage is that phase's.
        let (service, app_server) = if scenario == Scenario::ConnectRate {
            (
                connect_phase(&service_before, &service_connected),
                connect_phase(&app_before, &app_connected),
            )
        } else {
            (usage(&service_samples), usage(&app_samples))
        };
        let seconds = if scenario == Scenario::ConnectRate {
            connect_seconds
        } else {
            plan.step_seconds
        };
        let counts = counts(bucket, failed.len() as u64, scenario);
        let cpu_per_delivery = service
            .as_ref()
            .filter(|_| counts.received > 0)
            .map(|u| u.cpu_seconds * 1e6 / counts.received as f64);
        let redis = if scenario == Scenario::ConnectRate {
            cluster::redis_usage(&snap_before, &snap_connected, counts.sent)
        } else {
            match (snapshots.get(i), snapshots.get(i + 1)) {
                (Some(a), Some(b)) => cluster::redis_usage(a, b, counts.sent),
                _ => None,
            }
        };
        report_steps.push(Step {
            redis,
            index,
            senders: plan.senders_at(index as u32),
            connections: connected.saturating_sub(dropped_so_far),
            seconds,
            latency: report::latency(&bucket.latency),
            inbound_per_s: counts.sent as f64 / seconds.max(1e-9),
            outbound_per_s: counts.received as f64 / seconds.max(1e-9),
            passed: rule_passes(
                bucket,
                failed.len() as u64 + dropped_so_far,
                args.connections,
            ),
            service,
            app_server,
            service_cpu_us_per_delivery: cpu_per_delivery,
            generator: if scenario == Scenario::ConnectRate {
                None
            } else {
                usage(&generator_samples)
            },
            counts,
        });
    }
    let last_passing = report_steps
        .iter()
        .take_while(|s| s.passed)
        .last()
        .map(|s| s.index);
    let mut total = Bucket::empty_step();
    for bucket in step_buckets.iter().take(ran_steps) {
        total.add(bucket)?;
    }
    let total_counts = counts(&total, failed.len() as u64, scenario);
    let timeline = second_buckets
        .iter()
        .enumerate()
        .map(|(second, b)| {
            let ms = |q: f64| b.latency.value_at_quantile(q) as f64 / 1000.0;
            Second {
                second: second as u64,
                step: ((second as f64 * 1000.0 / step_ms) as usize + 1).min(steps as usize),
                sent: b.sent,
                received: b.received,
                p50_ms: ms(0.5),
                p99_ms: ms(0.99),
                max_ms: b.latency.max() as f64 / 1000.0,
            }
        })
        .collect();
    let whole = |before: Option<Sample>, after: Option<Sample>| -> Option<ProcessUsage> {
        Some(procstat::usage(&before?, &after?))
    };
    let service = whole(service_before, service_after);
    let cluster = target.clustered().then(|| {
        let measured = if scenario == Scenario::ConnectRate {
            Some((&snap_before, &snap_connected))
        } else {
            snapshots
                .first()
                .zip(snapshots.get(ran_steps).or(snapshots.last()))
        };
        let nodes = target.probe.nodes.len();
        let mut per_node = vec![0u64; nodes];
        for g in (0..args.connections).filter(|g| failed.binary_search(g).is_err()) {
            per_node[cluster::node_of(g, nodes)] += 1;
        }
        Cluster {
            nodes: cluster::node_usage(
                &target.probe,
                (&snap_before, &snap_after),
                measured,
                &per_node,
            ),
            rest_nodes: target.rest_nodes.clone(),
            redis: measured.and_then(|(a, b)| cluster::redis_usage(a, b, total_counts.sent)),
        }
    });
    let mut report = Report {
        tool: format!("switchyard-bench {}", env!("CARGO_PKG_VERSION")),
        scenario: scenario.name().to_owned(),
        target: target.name.clone(),
        mode: target.mode.to_owned(),
        transport: args.transport.to_ascii_lowercase(),
        protocol: args.protocol.to_ascii_lowercase(),
        connections: args.connections,
        message_size: args.message_size,
        send_interval_ms: plan.interval_ms,
        group_size: plan.group_size,
        groups: plan.groups,
        workers: args.workers as usize,
        started_at,
        // Measured time: the warm-up is neither counted nor timed.
        seconds: report_steps.iter().map(|s| s.seconds).sum(),
        latency: report::latency(&total.latency),
        counts: total_counts,
        passed: stopped_after.is_none()
            && last_passing == Some(ran_steps)
            && report_steps
                .iter()
                .all(|s| s.counts.lost == 0 && s.counts.duplicated == 0 && s.counts.reordered == 0)
            && failed.is_empty()
            && dropped == 0,
        last_passing_step: last_passing,
        steps: report_steps,
        timeline,
        connects_per_s: (connect_seconds > 0.0).then(|| connected as f64 / connect_seconds),
        // Measured at the end of the hold, while every connection is still open.
        service_rss_per_connection_bytes: match (scenario, &service_before, service_samples.last())
        {
            (Scenario::Idle, Some(before), Some(Some(held))) => Some(
                (held.rss_kb as f64 - before.rss_kb as f64) * 1024.0
                    / connected.saturating_sub(dropped).max(1) as f64,
            ),
            _ => None,
        },
        service,
        app_server: whole(app_before, app_after),
        azure_unit: None,
        cluster,
    };
    report.azure_unit = switchyard_capacity::plan::azure_unit(&report);
    if !errors.is_empty() {
        eprintln!("errors (count: kind):");
        for (kind, count) in &errors {
            eprintln!("  {count}: {kind}");
        }
    }
    if let Some(soak) = soak.as_ref() {
        // The static expectation (every room member, all the time) does not hold with
        // failures: the report's counts are the soak's, as its phases define them.
        let phases = soak.merge(&finals_phases)?;
        let all = phases.iter().fold(PhaseCounts::default(), |mut a, c| {
            let _ = a.add(c);
            a
        });
        let not_back: u64 = phases.iter().map(|c| c.not_reconnected).sum();
        for counts in std::iter::once(&mut report.counts)
            .chain(report.steps.iter_mut().map(|s| &mut s.counts))
        {
            counts.expected = all.expected;
            counts.received = all.delivered;
            counts.lost = all.lost();
            counts.duplicated = all.duplicated;
            counts.reordered = all.reordered;
            counts.connections_failed = failed.len() as u64 + not_back;
        }
        report.passed = soak::passed(&soak.marks, &phases) && failed.is_empty();
        write_outputs(&report, args.summary_json.as_ref(), args.chart.as_ref())?;
        soak.print(&phases, &target.probe, args.rss_csv.as_ref())?;
        if let Some(path) = &args.soak_json {
            let names = target.probe.nodes.iter().map(|n| n.name.clone()).collect();
            let out =
                soak::SoakReport::new(&soak.marks, &phases, soak.window, names, soak.rss.clone());
            let json = serde_json::to_string_pretty(&out).expect("the soak report serialises");
            std::fs::write(path, json + "\n")
                .map_err(|e| RunError(format!("--soak-json {}: {e}", path.display())))?;
        }
        return Ok(report);
    }
    if let Some(dashboard) = &dashboard {
        println!("{}", dashboard.summary());
    }
    write_outputs(&report, args.summary_json.as_ref(), args.chart.as_ref())?;
    if args.stateful_reconnect {
        println!("{}", stateful_line(&sum(&live).stateful, &report));
    }
    Ok(report)
}

/// One line on what stateful reconnect went through, with what it must not have cost
/// (lost or duplicated messages) and what it may (the service's CPU and memory).
fn stateful_line(counts: &crate::stats::StatefulCounts, report: &Report) -> String {
    let cpu = report
        .steps
        .iter()
        .filter_map(|s| s.service_cpu_us_per_delivery)
        .next_back()
        .map_or("-".to_owned(), |us| format!("{us:.1} µs/delivery"));
    // At the end of the last step, while every connection (and its buffers) is held.
    let rss = report
        .steps
        .last()
        .and_then(|s| s.service.as_ref())
        .map_or("-".to_owned(), |s| report::fmt_memory_kb(s.rss_kb));
    format!(
        "stateful reconnect: drops {}, reconnects {}, replayed by clients {}, duplicates dropped by clients {}, not agreed {}; lost {}, duplicated {}; service CPU {cpu}, service RSS {rss}",
        counts.drops,
        counts.reconnects,
        counts.replayed,
        counts.duplicates_dropped,
        counts.refused,
        report.counts.lost,
        report.counts.duplicated,
    )
}

fn describe(endpoint: &Endpoint) -> String {
    match endpoint {
        Endpoint::Service { bases, .. } => bases
            .iter()
            .map(|base| format!("{base}client/"))
            .collect::<Vec<_>>()
            .join(", "),
        Endpoint::Hub { url } => url.clone(),
    }
}

/// Counts of a merged bucket (lost = expected − received).
fn counts(bucket: &Bucket, connect_failed: u64, scenario: Scenario) -> Counts {
    Counts {
        sent: bucket.sent,
        expected: bucket.expected,
        received: bucket.received,
        lost: bucket.expected.saturating_sub(bucket.received),
        duplicated: bucket.duplicated,
        reordered: bucket.reordered,
        connections_failed: if scenario == Scenario::ConnectRate {
            bucket.expected.saturating_sub(bucket.received) + bucket.dropped
        } else {
            connect_failed + bucket.dropped
        },
        sent_bytes: bucket.sent_bytes,
        received_bytes: bucket.received_bytes,
    }
}

/// Azure's rule for one step; the ≥ 1 s share is the one the report prints
/// ([`report::share_over_1s`]).
fn rule_passes(bucket: &Bucket, failed_connections: u64, connections: u64) -> bool {
    let lost = bucket.expected.saturating_sub(bucket.received);
    let (buckets_v1, _) = report::latency_buckets(&bucket.latency);
    let slow_ok = report::share_over_1s(&buckets_v1, lost).is_none_or(|share| share <= RULE_SHARE);
    let connections_ok = (failed_connections as f64) <= RULE_SHARE * connections as f64;
    slow_ok && connections_ok
}

/// The 1-based step running at `now` (0 during the warm-up; the last after the end).
fn current_step(now: f64, measure_ms: f64, step_ms: f64, steps: u32) -> u32 {
    if now < measure_ms {
        0
    } else {
        (((now - measure_ms) / step_ms) as u32 + 1).min(steps)
    }
}

fn sum(live: &[Live]) -> Live {
    let mut total = Live::default();
    for l in live {
        total.add(l);
    }
    total
}

/// The live counters in Azure's names; `step` is the step running now (0 = warm-up).
fn azure_counters(live: &Live, plan: &Plan, step: u32) -> report::LiveCounters {
    let mut counters = report::LiveCounters {
        sending_step: if step == 0 { 0 } else { plan.senders_at(step) },
        epoch: u64::from(step),
        connections_success: live.connected.saturating_sub(live.dropped),
        connections_failed: live.connect_failed + live.dropped,
        connections_reconnect: 0,
        sent: live.sent,
        received: live.received,
        sent_bytes: live.sent_bytes,
        received_bytes: live.received_bytes,
        ..Default::default()
    };
    for (t, s) in counters.buckets_v1.iter_mut().zip(&live.buckets_v1) {
        *t = *s;
    }
    for (t, s) in counters.buckets_v2.iter_mut().zip(&live.buckets_v2) {
        *t = *s;
    }
    counters
}

fn write_outputs(
    report: &Report,
    summary: Option<&PathBuf>,
    chart: Option<&PathBuf>,
) -> Result<(), RunError> {
    println!("{}", report::table(report));
    if let Some(path) = summary {
        let json = serde_json::to_string_pretty(report).expect("report serialises");
        std::fs::write(path, json + "\n")
            .map_err(|e| RunError(format!("--summary-json {}: {e}", path.display())))?;
    }
    if let Some(path) = chart {
        crate::chart::write_svg(report, path)
            .map_err(|e| RunError(format!("--chart {}: {e}", path.display())))?;
    }
    Ok(())
}

/// Whether the run is a soak (failures on a timetable).
fn soak_enabled(args: &RunArgs) -> bool {
    args.kill_node_every.is_some() || args.restart_redis_at.is_some()
}

/// What a soak does, at its time.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Chaos {
    KillNode(usize),
    StartNode(usize),
    KillRedis,
    StartRedis,
}

/// From a soak's background checks to the run loop.
#[derive(Debug)]
enum Note {
    /// The node started again serves (holds an app-server connection, or its backplane
    /// answers): clients may connect there again.
    NodeServing(usize),
    /// An event is over and traffic has settled.
    Settled,
}

/// A soak's coordinator side: the failures' timetable, the phases, the outages the workers
/// report, and the memory series.
struct Soak {
    /// Pending events, in time order.
    timetable: std::collections::VecDeque<(f64, Chaos)>,
    marks: Vec<PhaseMark>,
    down: Vec<usize>,
    /// Events not yet settled: "steady" only when none is.
    busy: u32,
    outages: Vec<Outage>,
    sessions: usize,
    rss: Vec<RssRow>,
    rss_every: Duration,
    window: soak::Window,
    notes: mpsc::UnboundedSender<Note>,
    default_mode: bool,
    bin: PathBuf,
}

impl Soak {
    fn new(
        args: &RunArgs,
        target: &Target,
        window: soak::Window,
        notes: mpsc::UnboundedSender<Note>,
    ) -> Soak {
        let nodes = target.probe.nodes.len();
        // Room after each event for the node (or Redis) to come back and settle before
        // sending ends, so every phase is complete.
        let margin = 10_000.0;
        let mut timetable = Vec::new();
        if let Some(every) = args.kill_node_every {
            let every = every.as_secs_f64() * 1000.0;
            let down = args.node_down_for.as_secs_f64() * 1000.0;
            // Nodes 2..N in turn (index 1..N-1): node 1 carries the app server's
            // connections to the others and the REST calls.
            for i in 1u64.. {
                let at = window.measure_ms + every * i as f64;
                if at + down + margin > window.end_ms {
                    break;
                }
                let node = ((i - 1) % (nodes as u64 - 1) + 1) as usize;
                timetable.push((at, Chaos::KillNode(node)));
                timetable.push((at + down, Chaos::StartNode(node)));
            }
        }
        if let Some(at) = args.restart_redis_at {
            let at = window.measure_ms + at.as_secs_f64() * 1000.0;
            let down = args.redis_down_for.as_secs_f64() * 1000.0;
            if at + down + margin <= window.end_ms {
                timetable.push((at, Chaos::KillRedis));
                timetable.push((at + down, Chaos::StartRedis));
            } else {
                eprintln!(
                    "--restart-redis-at: too late in the run (after {:.0} s of sending), skipped",
                    (window.end_ms - window.measure_ms) / 1000.0
                );
            }
        }
        timetable.sort_by(|a, b| a.0.total_cmp(&b.0));
        Soak {
            timetable: timetable.into(),
            marks: vec![PhaseMark {
                start_ms: window.measure_ms,
                name: "steady".into(),
            }],
            down: Vec::new(),
            busy: 0,
            outages: Vec::new(),
            sessions: 0,
            rss: Vec::new(),
            rss_every: args.rss_every.unwrap_or(Duration::from_secs(15)),
            window,
            notes,
            default_mode: target.mode == "default",
            bin: args.service_bin.clone().unwrap_or_default(),
        }
    }

    fn next_at(&self) -> Option<f64> {
        self.timetable.front().map(|(at, _)| *at)
    }

    fn clock(&self) -> String {
        let s = ((now_ms() - self.window.measure_ms) / 1000.0).max(0.0) as u64;
        format!("{:02}:{:02}", s / 60, s % 60)
    }

    fn mark(&mut self, name: String) {
        println!("[{}] phase: {name}", self.clock());
        self.marks.push(PhaseMark {
            start_ms: now_ms(),
            name,
        });
    }

    fn tell_workers(&self, workers: &[WorkerHandle]) {
        for w in workers {
            w.send(Command::Nodes {
                down: self.down.clone(),
            });
        }
    }

    /// Runs the next event of the timetable.
    fn fire(&mut self, target: &mut Target, workers: &[WorkerHandle]) -> Result<(), RunError> {
        let Some((_, event)) = self.timetable.pop_front() else {
            return Ok(());
        };
        match event {
            Chaos::KillNode(i) => {
                let node = &mut target.probe.nodes[i];
                let pid = node
                    .pid
                    .take()
                    .ok_or_else(|| RunError(format!("{} has no pid", node.name)))?;
                let name = node.name.clone();
                // The phase starts before the kill: its clients see the drop at once.
                self.busy += 1;
                self.mark(format!("{name} down"));
                target._children.kill(pid)?;
                println!("[{}] SIGKILL {name} (pid {pid})", self.clock());
                self.down.push(i);
                self.tell_workers(workers);
            }
            Chaos::StartNode(i) => {
                let redis = target
                    .probe
                    .redis
                    .as_ref()
                    .map(|r| r.url.clone())
                    .unwrap_or_default();
                let node = &target.probe.nodes[i];
                let (name, url) = (node.name.clone(), node.url.clone());
                let port = url::Url::parse(&url)
                    .ok()
                    .and_then(|u| u.port())
                    .ok_or_else(|| RunError(format!("{name}: no port in {url}")))?;
                let started = target
                    ._children
                    .restart_node(&self.bin, &redis, &name, port)?;
                target.probe.nodes[i].pid = Some(started.pid);
                println!(
                    "[{}] started {name} again (pid {}, port {port})",
                    self.clock(),
                    started.pid
                );
                self.mark(format!("{name} back"));
                let (http, notes, default_mode) = (
                    target.probe.http.clone(),
                    self.notes.clone(),
                    self.default_mode,
                );
                tokio::spawn(async move {
                    // Default mode: clients there are refused until the app server (asked by
                    // node 1) has connected to it. Bounded: after a minute clients may try
                    // anyway (a refusal sends them elsewhere).
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while Instant::now() < deadline {
                        let ready = if default_mode {
                            cluster::serves_app_server(&http, &url).await
                        } else {
                            cluster::healthy(&http, &url).await
                        };
                        if ready {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    let _ = notes.send(Note::NodeServing(i));
                    tokio::time::sleep(soak::SETTLE).await;
                    let _ = notes.send(Note::Settled);
                });
            }
            Chaos::KillRedis => {
                let redis = target
                    .probe
                    .redis
                    .as_mut()
                    .ok_or_else(|| RunError("no Redis".into()))?;
                let pid = redis
                    .pid
                    .take()
                    .ok_or_else(|| RunError("Redis has no pid".into()))?;
                self.busy += 1;
                self.mark("redis down".into());
                target._children.kill(pid)?;
                println!("[{}] SIGKILL redis-server (pid {pid})", self.clock());
                let http = target.probe.http.clone();
                let urls: Vec<String> = target.probe.nodes.iter().map(|n| n.url.clone()).collect();
                let notes = self.notes.clone();
                tokio::spawn(async move {
                    // Over when every node has noticed (its health said degraded: a node
                    // healthy right after the restart may not have seen it yet, and
                    // resubscribes later) and every node's backplane answers again. A node
                    // that shows nothing within 10 s is taken as having noticed.
                    let noticed_by = Instant::now() + Duration::from_secs(10);
                    let mut noticed = vec![false; urls.len()];
                    while Instant::now() < noticed_by && noticed.iter().any(|n| !n) {
                        for (url, seen) in urls.iter().zip(noticed.iter_mut()) {
                            *seen |= !cluster::healthy(&http, url).await;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while Instant::now() < deadline {
                        let mut all = true;
                        for url in &urls {
                            all &= cluster::healthy(&http, url).await;
                        }
                        if all {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    tokio::time::sleep(soak::SETTLE).await;
                    let _ = notes.send(Note::Settled);
                });
            }
            Chaos::StartRedis => {
                let redis = target
                    .probe
                    .redis
                    .as_mut()
                    .ok_or_else(|| RunError("no Redis".into()))?;
                let port = local_port_of(&redis.url)
                    .ok_or_else(|| RunError(format!("no port in {}", redis.url)))?;
                let started = target._children.start_redis_on(port)?;
                redis.pid = Some(started.pid);
                println!(
                    "[{}] started redis-server again (pid {}, port {port})",
                    self.clock(),
                    started.pid
                );
                self.mark("redis back".into());
            }
        }
        Ok(())
    }

    fn note(&mut self, note: Note, workers: &[WorkerHandle]) {
        match note {
            Note::NodeServing(i) => {
                self.down.retain(|&d| d != i);
                self.tell_workers(workers);
                println!("[{}] node {} serves again", self.clock(), i + 1);
            }
            Note::Settled => {
                self.busy = self.busy.saturating_sub(1);
                if self.busy == 0 {
                    self.mark("steady".into());
                }
            }
        }
    }

    /// Marks after sending ended mean nothing (no post is due then).
    fn settle_marks(&mut self) {
        let end = self.window.end_ms;
        self.marks.retain(|m| m.start_ms < end);
    }

    async fn sample_rss(&mut self, probe: &Probe) {
        let mut nodes = Vec::new();
        for node in &probe.nodes {
            let rss = node.pid.and_then(procstat::sample).map(|s| s.rss_kb);
            let clients = match rss {
                Some(_) => cluster::client_connections_of(&probe.http, &node.url).await,
                None => None,
            };
            nodes.push((rss, clients));
        }
        let redis_kb = probe
            .redis
            .as_ref()
            .and_then(|r| r.pid)
            .and_then(procstat::sample)
            .map(|s| s.rss_kb);
        self.rss.push(RssRow {
            at_s: (now_ms() - self.window.measure_ms) / 1000.0,
            nodes,
            redis_kb,
        });
    }

    /// Every worker's phases, summed.
    fn merge(&self, finals: &[Vec<PhaseCounts>]) -> Result<Vec<PhaseCounts>, RunError> {
        let mut phases = vec![PhaseCounts::default(); self.marks.len()];
        for worker in finals {
            for (total, counts) in phases.iter_mut().zip(worker) {
                total.add(counts)?;
            }
        }
        Ok(phases)
    }

    fn print(
        &self,
        phases: &[PhaseCounts],
        probe: &Probe,
        csv: Option<&PathBuf>,
    ) -> Result<(), RunError> {
        println!(
            "{}",
            soak::phase_table(
                &self.marks,
                phases,
                self.window.measure_ms,
                self.window.end_ms
            )
        );
        let names: Vec<String> = probe.nodes.iter().map(|n| n.name.clone()).collect();
        println!(
            "{}",
            soak::rss_table(&names, &self.rss, &self.marks, self.window.measure_ms)
        );
        if let Some(path) = csv {
            std::fs::write(path, soak::rss_csv(&names, &self.rss))
                .map_err(|e| RunError(format!("--rss-csv {}: {e}", path.display())))?;
        }
        Ok(())
    }
}

/// A worker as the coordinator sees it.
enum WorkerHandle {
    Local(mpsc::UnboundedSender<Command>),
    Child {
        commands: mpsc::UnboundedSender<Command>,
        _child: tokio::process::Child,
    },
}

impl WorkerHandle {
    /// The process doing the work (this one for a worker in-process).
    fn pid(&self) -> Option<u32> {
        match self {
            WorkerHandle::Local(_) => Some(std::process::id()),
            WorkerHandle::Child { _child, .. } => _child.id(),
        }
    }

    fn send(&self, command: Command) {
        let (WorkerHandle::Local(tx) | WorkerHandle::Child { commands: tx, .. }) = self;
        let _ = tx.send(command);
    }
}

async fn start_workers(
    plan: &Plan,
    events: mpsc::UnboundedSender<(usize, Event)>,
) -> Result<Vec<WorkerHandle>, RunError> {
    let mut handles = Vec::new();
    if plan.workers <= 1 {
        let (tx, rx) = mpsc::unbounded_channel();
        let (worker_tx, mut worker_rx) = mpsc::unbounded_channel();
        tokio::spawn(worker::run(plan.clone(), worker_tx, rx));
        tokio::spawn(async move {
            while let Some(event) = worker_rx.recv().await {
                if events.send((0, event)).is_err() {
                    return;
                }
            }
        });
        handles.push(WorkerHandle::Local(tx));
        return Ok(handles);
    }
    let exe = std::env::current_exe().map_err(|e| RunError(format!("own executable: {e}")))?;
    for index in 0..plan.workers {
        let mut worker_plan = plan.clone();
        worker_plan.worker = index;
        let mut child = tokio::process::Command::new(&exe)
            .arg("worker")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| RunError(format!("start worker {index}: {e}")))?;
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, mut rx) = mpsc::unbounded_channel::<Command>();
        let first = serde_json::to_string(&worker_plan).expect("plan serialises");
        tokio::spawn(async move {
            if stdin
                .write_all(format!("{first}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            while let Some(command) = rx.recv().await {
                let line = serde_json::to_string(&command).expect("command serialises");
                if stdin
                    .write_all(format!("{line}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        let events = events.clone();
        let i = index as usize;
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => match serde_json::from_str::<Event>(&line) {
                        Ok(event) => {
                            let last = matches!(event, Event::Final { .. } | Event::Failed { .. });
                            let _ = events.send((i, event));
                            // After its final report a worker exits: that end is not a failure.
                            if last {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = events.send((
                                i,
                                Event::Failed {
                                    error: format!("unreadable report line ({e}): {line:.200}"),
                                },
                            ));
                        }
                    },
                    other => {
                        let why = match other {
                            Err(e) => format!("its output could not be read: {e}"),
                            _ => "it exited".to_owned(),
                        };
                        let _ = events.send((
                            i,
                            Event::Failed {
                                error: format!("{why} before its final report"),
                            },
                        ));
                        return;
                    }
                }
            }
        });
        handles.push(WorkerHandle::Child {
            commands: tx,
            _child: child,
        });
    }
    Ok(handles)
}

/// `switchyard-bench worker`: reads the plan from stdin, runs it, writes events to stdout.
pub async fn serve_worker() -> Result<(), RunError> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let first = lines
        .next_line()
        .await
        .map_err(|e| RunError(format!("stdin: {e}")))?
        .ok_or_else(|| RunError("no plan on stdin".into()))?;
    let plan: Plan = serde_json::from_str(&first).map_err(|e| RunError(format!("plan: {e}")))?;
    let (commands_tx, commands_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(command) = serde_json::from_str::<Command>(&line) {
                if commands_tx.send(command).is_err() {
                    return;
                }
            }
        }
        // stdin closed: the coordinator is gone; dropping the sender ends the worker.
    });
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let worker = tokio::spawn(worker::run(plan, events_tx, commands_rx));
    let mut stdout = tokio::io::stdout();
    while let Some(event) = events_rx.recv().await {
        let is_final = matches!(event, Event::Final { .. } | Event::Failed { .. });
        let line = serde_json::to_string(&event).expect("event serialises");
        stdout
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| RunError(format!("stdout: {e}")))?;
        stdout.flush().await.ok();
        if is_final {
            break;
        }
    }
    let _ = worker.await;
    Ok(())
}

/// The live view on stderr (hidden with --quiet or when stderr is not a terminal).
struct Progress {
    bar: ProgressBar,
}

impl Progress {
    fn new(quiet: bool, connections: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(
            Some(connections),
            if quiet {
                ProgressDrawTarget::hidden()
            } else {
                ProgressDrawTarget::stderr()
            },
        );
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
                .expect("template")
                .progress_chars("=> "),
        );
        bar.set_prefix("connecting");
        Progress { bar }
    }

    fn connecting(&self, live: &Live) {
        self.bar.set_position(live.connected + live.connect_failed);
        if live.connect_failed > 0 {
            self.bar
                .set_message(format!("{} failed", live.connect_failed));
        }
    }

    fn connected(&self, connected: u64, failed: u64, seconds: f64) {
        self.bar.println(format!(
            "connected {connected} ({failed} failed) in {seconds:.1} s"
        ));
    }

    fn sending(&self, seconds: f64) {
        self.bar.set_length(seconds.ceil() as u64);
        self.bar.set_position(0);
        self.bar.set_prefix("sending");
        self.bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} s {msg}")
                .expect("template")
                .progress_chars("=> "),
        );
    }

    fn tick(&self, elapsed: f64, live: &Live, plan: &Plan, measure_ms: f64, step_ms: f64) {
        self.bar.set_position(elapsed.max(0.0) as u64);
        let now = now_ms();
        let step = match current_step(now, measure_ms, step_ms, plan.steps.max(1)) {
            0 => "warm-up".to_owned(),
            s => format!(
                "step {s}/{} ({} senders)",
                plan.steps.max(1),
                plan.senders_at(s)
            ),
        };
        let slow: u64 = live.buckets_v1.last().copied().unwrap_or(0);
        self.bar.set_message(format!(
            "{step} sent {} received {} ≥1s {slow} dropped {}",
            live.sent, live.received, live.dropped
        ));
    }

    fn step_done(&self, index: u64, steps: u32, bucket: &Bucket, passed: bool) {
        let ms = |q: f64| bucket.latency.value_at_quantile(q) as f64 / 1000.0;
        self.bar.println(format!(
            "step {index}/{steps}: sent {} expected {} received {} p50 {:.1} ms p99 {:.1} ms max {:.1} ms — {}",
            bucket.sent,
            bucket.expected,
            bucket.received,
            ms(0.5),
            ms(0.99),
            bucket.latency.max() as f64 / 1000.0,
            if passed { "pass" } else { "FAIL (Azure's rule)" }
        ));
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(expected: u64, latencies_ms: &[u64]) -> Bucket {
        let mut b = Bucket::empty_step();
        b.expected = expected;
        b.received = latencies_ms.len() as u64;
        for ms in latencies_ms {
            b.latency.record(ms * 1000).unwrap();
        }
        b
    }

    #[test]
    fn azure_rule() {
        // 1 of 100 at ≥ 1 s: exactly 1 %, passes.
        let mut fast = vec![5; 99];
        fast.push(1000);
        assert!(rule_passes(&bucket(100, &fast), 0, 100));
        // 2 of 100 slow: fails.
        let mut slow = vec![5; 98];
        slow.extend([1000, 2500]);
        assert!(!rule_passes(&bucket(100, &slow), 0, 100));
        // Lost ones count as slow.
        assert!(!rule_passes(&bucket(100, &[5; 98]), 0, 100));
        assert!(rule_passes(&bucket(100, &[5; 99]), 0, 100));
        // > 1 % of connections failed.
        assert!(rule_passes(&bucket(100, &[5; 100]), 10, 1000));
        assert!(!rule_passes(&bucket(100, &[5; 100]), 11, 1000));
        // Nothing expected (idle): only connections count.
        assert!(rule_passes(&bucket(0, &[]), 0, 10));
    }

    #[test]
    fn local_ports() {
        assert_eq!(local_port_of("http://127.0.0.1:8080/"), Some(8080));
        assert_eq!(local_port_of("redis://127.0.0.1:6379"), Some(6379));
        assert_eq!(local_port_of("redis://localhost:6380/0"), Some(6380));
        assert_eq!(local_port_of("http://[::1]:81"), Some(81));
        assert_eq!(local_port_of("redis://10.0.0.1:6379"), None);
        assert_eq!(local_port_of("redis://example.com:6379"), None);
    }

    #[test]
    fn steps_by_time() {
        assert_eq!(current_step(0.0, 10.0, 100.0, 3), 0);
        assert_eq!(current_step(10.0, 10.0, 100.0, 3), 1);
        assert_eq!(current_step(110.0, 10.0, 100.0, 3), 2);
        assert_eq!(current_step(1e9, 10.0, 100.0, 3), 3);
    }
}
