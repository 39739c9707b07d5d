//! The connect phase of one worker: its share of the connections opened on the timetable
//! (`first + g / rate`, at most `--max-connecting` at once), each negotiated, connected and
//! joined to its group (by hub method, or by REST in serverless group scenarios).

use std::net::IpAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use switchyard_client::connection::{self, ConnectOptions, Connection, Transport};
use switchyard_hub_protocol::Format;
use tokio::sync::Semaphore;
use tokio::time::{sleep_until, timeout};

use super::{instant_at, now_ms, REST_TIMEOUT};
use crate::scenario::{Endpoint, Plan, RestTarget, Scenario};
use crate::stats::{Bucket, LiveCounters, Stats};
use crate::wire::{self, Received};

/// One reqwest client per source address (or one for the default).
pub(super) fn clients_by_address(addresses: &[IpAddr]) -> Vec<reqwest::Client> {
    if addresses.is_empty() {
        vec![connection::http_client(None)]
    } else {
        addresses
            .iter()
            .map(|a| connection::http_client(Some(*a)))
            .collect()
    }
}

pub(super) type Connected = (Vec<(u64, Connection)>, Vec<u64>, Bucket, f64);

/// Opens this worker's connections on the timetable `first + g / rate`, at most
/// `max_connecting` at once; joins each to its group for send-to-group.
pub(super) async fn connect_all(
    plan: &Plan,
    format: Format,
    transport: Transport,
    live: &Arc<LiveCounters>,
    errors: &mut Stats,
) -> Connected {
    let http = clients_by_address(&plan.source_addresses);
    // REST joins (rest-send-to-group) go unbound, as REST calls do (see `run`).
    let rest_http = connection::http_client(None);
    let permits = Arc::new(Semaphore::new(plan.max_connecting.max(1)));
    let first = now_ms() + 50.0;
    let rate = plan.connect_rate.max(0.001);
    let latency = Arc::new(Mutex::new(Bucket::empty_step()));
    let last_success = Arc::new(Mutex::new(first));
    // Connection g goes to node g mod N; its source address steps once per N connections,
    // so every node hears from every address. (g mod the address count put each node's
    // connections on one address when both counts were equal: 16,667 of that address's
    // ~28,000 ports towards one node, which the generator's unbound REST calls from
    // 127.0.0.1 then had to search around.)
    let nodes = match &plan.endpoint {
        Endpoint::Service { bases, .. } => bases.len().max(1),
        Endpoint::Hub { .. } => 1,
    };
    let mut attempts = Vec::new();
    for g in (0..plan.connections).filter(|&g| plan.owns(g)) {
        let due = first + g as f64 * 1000.0 / rate;
        sleep_until(instant_at(due)).await;
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        let options = options_for(plan, g, nodes, transport, format, &http);
        let (plan, live, latency, last_success, rest_http) = (
            plan.clone(),
            live.clone(),
            latency.clone(),
            last_success.clone(),
            rest_http.clone(),
        );
        attempts.push(tokio::spawn(async move {
            let node = crate::cluster::node_of(g, nodes);
            let result = timeout(
                Duration::from_secs(60),
                connect_one(&plan, g, node, options, rest_http),
            )
            .await
            .unwrap_or_else(|_| Err("connect: timed out after 60 s".to_owned()));
            drop(permit);
            let done = now_ms();
            let mut bucket = latency.lock();
            bucket.sent += 1;
            bucket.expected += 1;
            match result {
                Ok(conn) => {
                    live.connected.fetch_add(1, Relaxed);
                    bucket.received += 1;
                    let _ = bucket
                        .latency
                        .record((((done - due) * 1000.0) as u64).max(1));
                    let mut last = last_success.lock();
                    *last = last.max(done);
                    Ok((g, conn))
                }
                Err(e) => {
                    live.connect_failed.fetch_add(1, Relaxed);
                    Err((g, e))
                }
            }
        }));
    }
    let mut connections = Vec::new();
    let mut failed = Vec::new();
    for attempt in attempts {
        match attempt.await {
            Ok(Ok(pair)) => connections.push(pair),
            Ok(Err((g, e))) => {
                errors.error(e);
                failed.push(g);
            }
            Err(e) => errors.error(format!("connect task: {e}")),
        }
    }
    let bucket = std::mem::replace(&mut *latency.lock(), Bucket::empty_step());
    let seconds = (*last_success.lock() - first) / 1000.0;
    (connections, failed, bucket, seconds.max(0.0))
}

/// How connection `g` connects: its source address steps once per `nodes` connections.
pub(super) fn options_for(
    plan: &Plan,
    g: u64,
    nodes: usize,
    transport: Transport,
    format: Format,
    http: &[reqwest::Client],
) -> ConnectOptions {
    let source = (g as usize) / nodes.max(1);
    ConnectOptions {
        transport,
        format,
        access_token: None,
        local_address: (!plan.source_addresses.is_empty())
            .then(|| plan.source_addresses[source % plan.source_addresses.len()]),
        http: Some(http[source % http.len()].clone()),
        max_message_size: 16 * 1024 * 1024,
        stateful_reconnect: plan.stateful_reconnect,
        ..ConnectOptions::new(transport, format)
    }
}

/// Negotiate (following redirects), connect, handshake; then join the group if any.
/// `node`: which of several service bases to connect to.
pub(super) async fn connect_one(
    plan: &Plan,
    g: u64,
    node: usize,
    mut options: ConnectOptions,
    rest_http: reqwest::Client,
) -> Result<Connection, String> {
    // A user id only where the scenario addresses users: it costs the service an entry in
    // its user index per connection, which would blur what idle connections cost.
    let user = (plan.scenario == Scenario::RestSendToUser).then(|| Plan::user_of(g));
    let url = match &plan.endpoint {
        Endpoint::Service { bases, access_key } => {
            // Connection g negotiates at its node, with a token naming that node.
            let base = &bases[node % bases.len().max(1)];
            let base_url = url::Url::parse(base).map_err(|e| format!("endpoint: {e}"))?;
            let audience = switchyard_auth::client_audience(&base_url, &plan.hub);
            let claims: Vec<(String, String)> =
                user.map(|u| ("nameid".to_owned(), u)).into_iter().collect();
            options.access_token = Some(switchyard_auth::issue_token(
                access_key,
                &audience,
                &claims,
                Duration::from_secs(24 * 3600),
                now_ms() as i64 / 1000,
            ));
            format!("{base}client/?hub={}", plan.hub)
        }
        Endpoint::Hub { url } => {
            let base = format!("{}/{}", url.trim_end_matches('/'), plan.hub);
            match user {
                Some(user) => format!("{base}?user={user}"),
                None => base,
            }
        }
    };
    let mut conn = connection::connect(&url, &options)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    // Serverless: members join by REST (the call returns once the membership holds).
    if let (
        Scenario::RestSendToGroup | Scenario::RestChatRoom,
        Endpoint::Service { .. },
        Some(rest),
    ) = (plan.scenario, &plan.endpoint, &plan.rest)
    {
        if let Some(group) = plan.group_of(g) {
            let base = plan.rest_base_of(rest, g).unwrap_or_default();
            let url = format!(
                "{base}{}",
                group_member_path(&plan.hub, &group_name(group), conn.connection_id())
            );
            let mut request = rest_http.put(&url).timeout(REST_TIMEOUT);
            if let Some(token) = rest_token(rest, &url) {
                request = request.bearer_auth(token);
            }
            let response = request.send().await.map_err(|e| {
                format!("join group by REST: {}", switchyard_client::with_causes(&e))
            })?;
            if !response.status().is_success() {
                return Err(format!("join group by REST: status {}", response.status()));
            }
        }
    } else if plan.scenario.uses_groups() {
        if let Some(group) = plan.group_of(g) {
            let frame = wire::invocation(
                conn.format(),
                "JoinGroup",
                Some("join".to_owned()),
                vec![json!(group_name(group))],
            );
            conn.send_raw(frame)
                .await
                .map_err(|e| format!("join group: {e}"))?;
            loop {
                let body = conn
                    .next_frame()
                    .await
                    .map_err(|e| format!("join group: {e}"))?;
                match wire::decode(conn.format(), &body)? {
                    Received::Completion { error: None, .. } => break,
                    Received::Completion { error: Some(e), .. } => {
                        return Err(format!("join group: {e}"))
                    }
                    Received::Close { error } => {
                        return Err(format!("join group: closed: {error:?}"))
                    }
                    _ => continue,
                }
            }
        }
    }
    Ok(conn)
}

pub fn group_name(group: u64) -> String {
    format!("group{group}")
}

/// `api/hubs/{hub}/groups/{group}/connections/{id}` (2022-06-01): PUT adds, DELETE removes.
pub(super) fn group_member_path(hub: &str, group: &str, connection_id: &str) -> String {
    format!(
        "api/hubs/{hub}/groups/{group}/connections/{}?api-version=2022-06-01",
        percent_encoding::utf8_percent_encode(connection_id, percent_encoding::NON_ALPHANUMERIC)
    )
}

/// An Azure-style bearer for one REST URL (its audience), when the target signs calls.
pub(super) fn rest_token(rest: &RestTarget, url: &str) -> Option<String> {
    rest.access_key.as_ref().map(|key| {
        switchyard_auth::issue_token(
            key,
            url,
            &[],
            Duration::from_secs(24 * 3600),
            now_ms() as i64 / 1000,
        )
    })
}
