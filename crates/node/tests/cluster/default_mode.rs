//! Default mode on three real nodes sharing one real `redis-server`, with Rust app servers
//! that know only one node's address (as the SDK behind a connection string does): the nodes
//! ask them (`target` pings) to connect everywhere, so clients on every node are served, and
//! what app servers send, join and ask reaches clients on every node.

use super::redis_node;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_bench::hub::BenchHub;
use switchyard_client::app_server::AppServer;
use switchyard_client::{connect, ConnectOptions, Connection, Transport};
use switchyard_core::Channel;
use switchyard_hub_protocol::{CompletionResult, Format, HubMessage};
use switchyard_node::Config;
use switchyard_service_protocol::CONNECTION_TYPE_ONDEMAND;
use switchyard_testkit::{
    dial_url, eventually, handshake_request, within, AppServer as RawAppServer, RedisServer,
    TestServer,
};

const HUB: &str = "bench";
const STEP: Duration = Duration::from_secs(15);

async fn nodes(url: &str, prefix: &str, names: &[&str]) -> Vec<TestServer> {
    let mut nodes = Vec::new();
    for name in names {
        nodes.push(node(url, prefix, name).await);
    }
    nodes
}

async fn node(url: &str, prefix: &str, name: &str) -> TestServer {
    redis_node(url, prefix, name, Config::default()).await
}

/// An app server that knows only `node` (not waited for: the test waits for what it needs).
fn app_server(node: &TestServer, server_id: &str, connections: usize) -> AppServer {
    let mut config = node.app_server_config(&[HUB]);
    config.connections_per_hub = connections;
    config.server_id = server_id.to_owned();
    AppServer::start(config, Arc::new(BenchHub)).unwrap()
}

/// A client of `node`, as user `user`, optionally pinned to an app server.
async fn client(node: &TestServer, user: &str, sticky: Option<&str>) -> Connection {
    let mut claims = vec![("asrs.s.uid", user)];
    if let Some(server) = sticky {
        claims.extend([("asrs.s.sn", server), ("asrs.s.ssticky", "Required")]);
    }
    let mut options = ConnectOptions::new(Transport::WebSockets, Format::Json);
    options.access_token = Some(node.token_with(HUB, &claims));
    within("connect", STEP, connect(&node.client_url(HUB), &options))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", node.addr))
}

/// The next message that is not a Ping.
async fn next(connection: &mut Connection) -> HubMessage<Value> {
    loop {
        match within("a message", STEP, connection.next()).await.unwrap() {
            HubMessage::Ping => continue,
            other => return other,
        }
    }
}

async fn invoke(connection: &mut Connection, id: &str, target: &str, arguments: Vec<Value>) {
    connection
        .send(&HubMessage::Invocation {
            headers: vec![],
            invocation_id: Some(id.to_owned()),
            target: target.to_owned(),
            arguments,
            stream_ids: None,
        })
        .await
        .unwrap();
}

/// The completion of invocation `id`, taking the `Measure` invocations before it.
async fn completion(
    connection: &mut Connection,
    id: &str,
) -> (Vec<Vec<Value>>, Result<Value, String>) {
    let mut measures = Vec::new();
    loop {
        match next(connection).await {
            HubMessage::Invocation {
                target, arguments, ..
            } if target == "Measure" => measures.push(arguments),
            HubMessage::Completion {
                invocation_id,
                result,
                ..
            } if invocation_id == id => {
                let result = match result {
                    CompletionResult::Void => Ok(Value::Null),
                    CompletionResult::Value(v) => Ok(v),
                    CompletionResult::Error(e) => Err(e),
                };
                return (measures, result);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Expects `Measure(arguments)` next.
async fn expect_measure(connection: &mut Connection, arguments: Vec<Value>) {
    match next(connection).await {
        HubMessage::Invocation {
            target,
            arguments: got,
            ..
        } => {
            assert_eq!(target, "Measure");
            assert_eq!(got, arguments);
        }
        other => panic!("expected Measure, got {other:?}"),
    }
}

fn metric(node: &TestServer, name: &str) -> f64 {
    let text = node.node.metrics.encode();
    text.lines()
        .filter(|line| line.starts_with(name))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_server_that_knows_one_node_serves_clients_on_every_node() {
    let redis = RedisServer::start();
    let nodes = nodes(&redis.url(), "dm", &["n1", "n2", "n3"]).await;
    // Both app servers know only n1; s2 holds two connections there.
    let s1 = app_server(&nodes[0], "s1", 1);
    let s2 = app_server(&nodes[0], "s2", 2);
    within("s1 connects", STEP, s1.ready()).await;
    within("s2 connects", STEP, s2.ready()).await;
    // The other nodes asked both to connect to them too.
    eventually(
        "every node holds connections from both app servers",
        STEP,
        || nodes.iter().all(|n| n.node.server_connection_count() >= 2),
    )
    .await;
    assert!(
        metric(
            &nodes[0],
            "switchyard_cluster_server_pings_total{kind=\"target\"}"
        ) >= 4.0
    );
    assert_eq!(
        nodes[1].node.server_connection_count(),
        2,
        "one per app server"
    );

    // A client on each node, n3's pinned to s2.
    let mut a = client(&nodes[0], "ua", Some("s1")).await;
    let mut b = client(&nodes[1], "ub", Some("s1")).await;
    let mut c = client(&nodes[2], "uc", Some("s2")).await;
    let (b_id, c_id) = (b.connection_id().to_owned(), c.connection_id().to_owned());

    // Served where they are: echo through the app server's connection to their own node.
    for (n, client) in [&mut a, &mut b, &mut c].into_iter().enumerate() {
        let id = format!("echo{n}");
        invoke(client, &id, "Echo", vec![json!(n), json!("hi")]).await;
        let (measures, done) = completion(client, &id).await;
        assert_eq!(measures, [vec![json!(n), json!("hi")]]);
        assert_eq!(done, Ok(Value::Null));
    }

    // A broadcast sent over a's connection (to n1) reaches every node, in order.
    for i in 0..20 {
        invoke(
            &mut a,
            &format!("b{i}"),
            "Broadcast",
            vec![json!(i), json!("all")],
        )
        .await;
    }
    for i in 0..20 {
        let (measures, done) = completion(&mut a, &format!("b{i}")).await;
        assert_eq!(measures, [vec![json!(i), json!("all")]]);
        assert_eq!(done, Ok(Value::Null));
    }
    for client in [&mut b, &mut c] {
        for i in 0..20 {
            expect_measure(client, vec![json!(i), json!("all")]).await;
        }
    }

    // To a connection and a user on other nodes.
    invoke(
        &mut a,
        "tc",
        "SendToConnection",
        vec![json!(c_id), json!(1), json!("conn")],
    )
    .await;
    assert_eq!(completion(&mut a, "tc").await.1, Ok(Value::Null));
    expect_measure(&mut c, vec![json!(1), json!("conn")]).await;
    invoke(
        &mut c,
        "tu",
        "SendToUser",
        vec![json!("ub"), json!(2), json!("user")],
    )
    .await;
    assert_eq!(completion(&mut c, "tu").await.1, Ok(Value::Null));
    expect_measure(&mut b, vec![json!(2), json!("user")]).await;

    // A join acknowledged to the app server holds cluster-wide: the next group send from
    // another node reaches the member. s1's sends outside an invocation rotate over its
    // connections to every node, so some of these joins are made from another node than b's.
    let context = s1.hub(HUB).unwrap();
    for g in 0..3 {
        let group = format!("g{g}");
        assert!(within("join", STEP, context.add_to_group(&b_id, &group))
            .await
            .unwrap());
        invoke(
            &mut c,
            &group,
            "SendToGroup",
            vec![json!(group), json!(g), json!("group")],
        )
        .await;
        assert_eq!(completion(&mut c, &group).await.1, Ok(Value::Null));
        expect_measure(&mut b, vec![json!(g), json!("group")]).await;
    }
    invoke(
        &mut a,
        "ug",
        "AddUserToGroup",
        vec![json!("uc"), json!("ug")],
    )
    .await;
    assert_eq!(completion(&mut a, "ug").await.1, Ok(Value::Null));
    invoke(
        &mut b,
        "sg",
        "SendToGroup",
        vec![json!("ug"), json!(4), json!("user group")],
    )
    .await;
    assert_eq!(completion(&mut b, "sg").await.1, Ok(Value::Null));
    expect_measure(&mut c, vec![json!(4), json!("user group")]).await;

    // Client results across nodes: a's app server (s1, over n1) asks c (on n3, served by
    // s2): n3 routes it to s2 and maps it for s1; and asks b (on n2, served by s1 itself).
    for (target, id, value) in [(&c_id, "r1", 41), (&b_id, "r2", 42)] {
        invoke(
            &mut a,
            id,
            "AskClient",
            vec![json!(target), json!("Question"), json!(value)],
        )
        .await;
        let asked = if target == &c_id { &mut c } else { &mut b };
        let invocation_id = match next(asked).await {
            HubMessage::Invocation {
                invocation_id: Some(invocation_id),
                target,
                arguments,
                ..
            } => {
                assert_eq!(target, "Question");
                assert_eq!(arguments, [json!(value)]);
                invocation_id
            }
            other => panic!("expected the client invocation, got {other:?}"),
        };
        asked
            .send(&HubMessage::Completion {
                headers: vec![],
                invocation_id,
                result: CompletionResult::Value(json!(value + 1)),
            })
            .await
            .unwrap();
        assert_eq!(completion(&mut a, id).await.1, Ok(json!(value + 1)));
    }
    // A client nobody holds fails at once.
    invoke(
        &mut a,
        "r3",
        "AskClient",
        vec![json!("nobody.n9"), json!("Question"), json!(0)],
    )
    .await;
    let failed = completion(&mut a, "r3").await.1.unwrap_err();
    assert!(failed.contains("does not exist"), "{failed}");

    // n3 shuts down: the others forget it at once and tell the app servers it is offline.
    let mut n3 = nodes;
    let stopped = n3.pop().unwrap();
    within("n3 stops", STEP, stopped.stop()).await;
    eventually("n1 counts n3 lost", STEP, || {
        metric(&n3[0], "switchyard_cluster_nodes_lost_total") >= 1.0
    })
    .await;
    assert_eq!(metric(&n3[0], "switchyard_cluster_nodes "), 2.0);
    assert!(
        metric(
            &n3[0],
            "switchyard_cluster_server_pings_total{kind=\"offline\"}"
        ) >= 1.0
    );
    drop((s1, s2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_starts_later_gets_connections_and_a_capped_node_passes_clients_on() {
    let redis = RedisServer::start();
    let mut nodes = nodes(&redis.url(), "late", &["n1"]).await;
    let mut config = nodes[0].app_server_config(&[HUB]);
    config.server_id = "capped".to_owned();
    // One fixed connection and one OnDemand: the third node never gets one.
    config.max_hub_server_connections = Some(2);
    let app = AppServer::start(config, Arc::new(BenchHub)).unwrap();
    within("the app server connects", STEP, app.ready()).await;
    nodes.push(node(&redis.url(), "late", "n2").await);
    eventually("n2 gets a connection", STEP, || {
        nodes[1].node.server_connection_count() == 1
    })
    .await;
    nodes.push(node(&redis.url(), "late", "n3").await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(nodes[2].node.server_connection_count(), 0);
    // Its clients are negotiated onto a node that has the app server (n1: n2's connection
    // reached it through n1) and served there, whichever node their requests reach.
    let mut on_n3 = client(&nodes[2], "u", None).await;
    invoke(&mut on_n3, "e", "Echo", vec![json!(1), json!("steered")]).await;
    let (measures, done) = completion(&mut on_n3, "e").await;
    assert_eq!(measures, [vec![json!(1), json!("steered")]]);
    assert_eq!(done, Ok(Value::Null));
    invoke(&mut on_n3, "i", "GetInstanceId", vec![]).await;
    let (_, instance) = completion(&mut on_n3, "i").await;
    let instance = instance.unwrap();
    assert!(
        instance.as_str().unwrap().starts_with("n1~"),
        "served by {instance}"
    );
    assert_eq!(nodes[2].node.client_connection_count(), 0);
    drop(app);
}

/// The `message` payloads published on `channel` for `span`, read by a plain subscriber
/// (RESP by hand: binary-safe).
fn published_on(port: u16, channel: &str, span: Duration) -> Vec<usize> {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let command = format!(
        "*2\r\n$9\r\nSUBSCRIBE\r\n${}\r\n{channel}\r\n",
        channel.len()
    );
    socket.write_all(command.as_bytes()).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (mut buffer, mut sizes) = (Vec::new(), Vec::new());
    let end = std::time::Instant::now() + span;
    let mut chunk = [0u8; 64 * 1024];
    while std::time::Instant::now() < end {
        match socket.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(_) => continue,
        }
        while let Some((parts, used)) = resp_array(&buffer) {
            if parts.first().map(Vec::as_slice) == Some(b"message") {
                sizes.push(parts[2].len());
            }
            buffer.drain(..used);
        }
    }
    sizes
}

/// One RESP array of bulk strings and integers at the start of `bytes`, and its length.
fn resp_array(bytes: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(bytes: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = at + bytes.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&bytes[at..end], end + 2))
    }
    let number = |text: &[u8]| std::str::from_utf8(text).ok()?.parse::<usize>().ok();
    let (head, mut at) = line(bytes, 0)?;
    let count = number(head.strip_prefix(b"*")?)?;
    let mut parts = Vec::new();
    for _ in 0..count {
        let (head, next) = line(bytes, at)?;
        if let Some(len) = head.strip_prefix(b"$") {
            let len = number(len)?;
            parts.push(bytes.get(next..next + len)?.to_vec());
            at = next + len + 2;
        } else {
            parts.push(head[1..].to_vec());
            at = next;
        }
    }
    (bytes.len() >= at).then_some((parts, at))
}

/// An app server `id` for 100 hubs, knowing only `node`.
fn wide_app_server(node: &TestServer, id: &str) -> AppServer {
    let hubs: Vec<String> = (0..100).map(|n| format!("hub{n:02}")).collect();
    let hubs: Vec<&str> = hubs.iter().map(String::as_str).collect();
    let mut config = node.app_server_config(&hubs);
    config.server_id = id.to_owned();
    AppServer::start(config, Arc::new(BenchHub)).unwrap()
}

/// Presence heartbeats carried every node's whole list of app servers each second (100 app
/// servers × 100 hubs: 481 KB a second from every node to every node); now the list goes out when it
/// changes, to a node heard for the first time, and every ten seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_sends_the_list_of_app_servers_when_it_changes() {
    let redis = RedisServer::start();
    let prefix = "presence";
    let nodes = nodes(&redis.url(), prefix, &["n1", "n2"]).await;
    let long_id = "app-server-0123456789abcdef0123456789abcdef";
    let first = wide_app_server(&nodes[0], &format!("{long_id}-1"));
    eventually("both nodes hold the app server's 100 hubs", STEP, || {
        nodes
            .iter()
            .all(|n| n.node.server_connection_count() == 100)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let channel = switchyard_backplane::envelope::channel_name(prefix, &Channel::All);
    let port = redis.port;
    let span = Duration::from_secs(6);
    let sizes = tokio::task::spawn_blocking(move || published_on(port, &channel, span))
        .await
        .unwrap();
    // Each list is ~6 KB; a heartbeat without it ~100 bytes.
    let lists = sizes.iter().filter(|size| **size > 2048).count();
    println!(
        "presence: {} messages, {} bytes in {span:?}; {lists} with the list",
        sizes.len(),
        sizes.iter().sum::<usize>()
    );
    assert!(
        sizes.len() >= 10,
        "heartbeats still go out each second: {sizes:?}"
    );
    assert!(
        lists <= 2,
        "the list went out {lists} times in 6 s: {sizes:?}"
    );

    // A change goes out at once: a second app server connecting to n1 (its list grows by
    // 100 hubs) is in the next message n1 publishes, well before ten seconds.
    let channel = switchyard_backplane::envelope::channel_name(prefix, &Channel::All);
    let span = Duration::from_secs(3);
    let listening = tokio::task::spawn_blocking(move || published_on(port, &channel, span));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = wide_app_server(&nodes[0], &format!("{long_id}-2"));
    within("the second app server connects", STEP, second.ready()).await;
    let sizes = listening.await.unwrap();
    assert!(
        sizes.iter().any(|size| *size > 8192),
        "no list with both app servers went out: {sizes:?}"
    );
    drop((first, second));
}

/// An OnDemand connection of raw app server `server_id` to `node`, naming `target`, upgraded
/// but not yet handshaken.
async fn dial_on_demand(node: &TestServer, server_id: &str, target: &str) -> RawAppServer {
    let token = node.server_token(HUB, server_id);
    let url = format!("{}&target={target}", node.server_ws_url(HUB));
    RawAppServer::new(dial_url(&url, Some(&token), Some(server_id)).await.unwrap())
}

/// Sends the OnDemand handshake naming `target`; returns the answer's error (empty: accepted).
async fn on_demand_handshake(app: &mut RawAppServer, target: &str) -> String {
    let mut request = handshake_request(0);
    request.connection_type = CONNECTION_TYPE_ONDEMAND;
    request.target = target.to_owned();
    app.handshake(request).await.error_message
}

/// [`dial_on_demand`] and its handshake.
async fn on_demand(node: &TestServer, server_id: &str, target: &str) -> (RawAppServer, String) {
    let mut app = dial_on_demand(node, server_id, target).await;
    let error = on_demand_handshake(&mut app, target).await;
    (app, error)
}

/// Behind a round-robin balancer an OnDemand connection asked for one node lands on another
/// as often as not. Passed on, it left the node it landed on to be asked for again — and
/// with asks backing off to a minute, a 3-node cluster took over two minutes now and then
/// until every node had a direct connection per hub (CI, once). Kept by a node that lacks a
/// connection from that app server, every landed connection serves some node at once; only
/// one landing on a node that has one already is passed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_demand_connection_that_lands_on_a_node_lacking_one_is_kept_there() {
    let redis = RedisServer::start();
    let nodes = nodes(&redis.url(), "adopt", &["n1", "n2", "n3"]).await;
    // A raw app server on n1: n1 asks it to connect to n2 and n3, which names their instances.
    let mut fixed = RawAppServer::open(&nodes[0], HUB, "s9").await;
    let mut instances = Vec::new();
    while instances.len() < 2 {
        let ping = fixed.ping("target").await;
        let instance = ping.get("target").unwrap().to_owned();
        if !instances.contains(&instance) {
            instances.push(instance);
        }
    }
    instances.sort();
    let (n2, n3) = (&instances[0], &instances[1]);
    assert!(
        n2.starts_with("n2~") && n3.starts_with("n3~"),
        "{instances:?}"
    );

    // One for n3 lands on n2, which has none: kept there, a direct connection of n2's. A
    // second one arriving before the first is registered is passed on (n2 needs only one).
    let mut kept = dial_on_demand(&nodes[1], "s9", n3).await;
    let mut passed = dial_on_demand(&nodes[1], "s9", n3).await;
    assert_eq!(on_demand_handshake(&mut kept, n3).await, "", "kept");
    assert_eq!(on_demand_handshake(&mut passed, n3).await, "", "passed on");
    eventually("n2 holds one, n3 the other", STEP, || {
        nodes[1].node.server_connection_count() == 1 && nodes[2].node.server_connection_count() == 1
    })
    .await;
    assert_eq!(
        metric(&nodes[1], "switchyard_server_connections_passed_on "),
        0.0
    );
    assert_eq!(
        metric(&nodes[2], "switchyard_server_connections_passed_on "),
        1.0
    );
    // A handshake naming an instance other than its URL's is refused, kept or not.
    let mut mismatched = dial_on_demand(&nodes[0], "s7", n3).await;
    let error = on_demand_handshake(&mut mismatched, "n7~gone").await;
    assert!(error.contains("not in this cluster"), "{error}");
    // n3 holds s9 only through n2: it asks s9 itself, over that connection, for another,
    // at once (the balancer's miss, retried without waiting for n1's next ask).
    assert_eq!(passed.ping("target").await.get("target"), Some(n3.as_str()));
    // Missed again (n2 passes it on; n3 refuses a second passed-on one): asked again.
    let (_refused, error) = on_demand(&nodes[1], "s9", n3).await;
    assert!(error.contains("only a direct one"), "{error}");
    assert_eq!(passed.ping("target").await.get("target"), Some(n3.as_str()));
    // A direct one arrives: n3 holds both, and asks no more.
    let (_direct, error) = on_demand(&nodes[2], "s9", n3).await;
    assert_eq!(error, "");
    eventually("n3 holds the direct connection", STEP, || {
        nodes[2].node.server_connection_count() == 2
    })
    .await;
    passed.assert_quiet().await;

    // A connection for an instance not in the cluster is still refused, kept or not.
    let (_refused, error) = on_demand(&nodes[2], "s8", "n7~gone").await;
    assert!(error.contains("not in this cluster"), "{error}");
    drop(fixed);
}
