//! What a node believes of the cluster: backplane messages only when sealed with the
//! cluster's secret, node addresses only when they are a node's origin, and passed-on
//! requests only with another node's assertion. The attacker here can publish on Redis.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::json;
use switchyard_backplane::envelope::{self, Seal, Stamp};
use switchyard_backplane::{Backplane, Sink};
use switchyard_backplane_redis::{RedisBackplane, RedisSettings};
use switchyard_core::{Channel, HubName, Message, Payloads, Protocol, Target};
use switchyard_hub_protocol::Format;
use switchyard_node::Config;
use switchyard_testkit::{eventually_async, Msg, RawClient, RedisServer, TestServer, WAIT};

use super::redis_node;

const HUB: &str = "chat";

fn keyed() -> Config {
    Config {
        access_key: Some("trust-test-access-key-0123456789abcdef".into()),
        ..Config::default()
    }
}

fn hub() -> HubName {
    HubName::new(HUB, None).unwrap()
}

fn send_all(text: &str) -> Message {
    let message = Msg::invocation("m", &[json!(text)]);
    Message::Send {
        hub: hub(),
        target: Target::All { excluded: vec![] },
        payloads: Payloads::new()
            .with(Protocol::Json, message.json.clone())
            .with(Protocol::MessagePack, message.msgpack.clone()),
    }
}

/// Publishes `payload` on `channel` as any Redis client could (RESP by hand: binary-safe).
fn raw_publish(port: u16, channel: &str, payload: &[u8]) {
    let mut socket = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut command = Vec::new();
    command.extend_from_slice(b"*3\r\n$7\r\nPUBLISH\r\n");
    for part in [channel.as_bytes(), payload] {
        command.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        command.extend_from_slice(part);
        command.extend_from_slice(b"\r\n");
    }
    socket.write_all(&command).unwrap();
    let mut reply = [0u8; 64];
    let n = socket.read(&mut reply).unwrap();
    assert!(
        reply[..n].starts_with(b":"),
        "PUBLISH answered {:?}",
        &reply[..n]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_on_redis_not_sealed_by_a_node_are_dropped_and_counted() {
    let redis = RedisServer::start();
    let url = redis.url();
    let n1 = redis_node(&url, "trust-a", "n1", keyed()).await;
    let n2 = redis_node(&url, "trust-a", "n2", keyed()).await;
    let (mut client, _) = RawClient::start(&n1, HUB, &n1.token(HUB, Some("u")), Format::Json).await;
    client.handshake_result().await.expect("handshake");
    n1.node.cluster().barrier().await;

    // A validly encoded broadcast, unsealed, then sealed with a key that is not the cluster's.
    let channel = envelope::channel_name("trust-a", &Channel::All);
    let stamp = Stamp {
        origin: 77,
        seq: 1,
        asked: false,
    };
    let bare = envelope::encode(stamp, &send_all("forged"));
    raw_publish(redis.port, &channel, &bare);
    let stranger = Seal::from_secrets(b"not-the-cluster-secret-0123456789abcdef", &[]);
    let wrong = envelope::encode_sealed(Stamp { seq: 2, ..stamp }, &send_all("forged"), &stranger);
    raw_publish(redis.port, &channel, &wrong);

    // A real node's send, published after them, is the first thing the client hears.
    n2.node.executor().send(
        &hub(),
        Target::All { excluded: vec![] },
        match send_all("real") {
            Message::Send { payloads, .. } => payloads,
            _ => unreachable!(),
        },
    );
    client.expect(&Msg::invocation("m", &[json!("real")])).await;
    let series = "switchyard_backplane_messages_total{kind=\"unauthenticated\"}";
    eventually_async("both forgeries are counted", WAIT, || async {
        n1.metric(series).await == 2
    })
    .await;
    n1.stop().await;
    n2.stop().await;
}

/// Plays a node named in connection keys: hears the questions to it (with `listen`, as
/// anyone reading Redis could) and answers "where are you" with `url`, published with
/// `speak` (sealed with whatever key that backplane has).
struct Impostor {
    speak: Arc<RedisBackplane>,
    url: String,
}

impl Sink for Impostor {
    fn receive(&self, message: &Arc<Message>) {
        if let Some((asker, answer)) = address_answer(message, &self.url) {
            self.speak
                .publish(&[Channel::Node(asker)], Arc::new(answer));
        }
    }
}

/// For a question "where are you" (a control body `[0, from, id, [9]]`), the answer
/// `[1, id, [3, url]]` to publish on the asker's channel: written by hand from the open
/// format, as an attacker would.
fn address_answer(asked: &Message, url: &str) -> Option<(String, Message)> {
    use switchyard_backplane::envelope::{Reader, Writer};
    let Message::Control { hub, body } = asked else {
        return None;
    };
    let mut r = Reader::new(body);
    let (4, 0) = (r.array().ok()?, r.uint().ok()?) else {
        return None;
    };
    let from = r.str().ok()?.to_string();
    let id = r.uint().ok()?;
    let (1, 9) = (r.array().ok()?, r.uint().ok()?) else {
        return None;
    };
    let mut w = Writer::with_capacity(64);
    w.array(3);
    w.uint(1);
    w.uint(id);
    w.array(2);
    w.uint(3);
    w.str(url);
    let answer = Message::Control {
        hub: hub.clone(),
        body: w.finish(),
    };
    Some((from, answer))
}

async fn backplane(url: &str, prefix: &str, seal: Seal) -> Arc<RedisBackplane> {
    let mut settings = RedisSettings::new(url);
    settings.prefix = prefix.into();
    settings.seal = seal;
    RedisBackplane::connect(settings).await.unwrap()
}

/// A listener that counts the connections made to it and keeps what each sent first; it
/// answers 404 so the asker does not wait.
async fn recorder() -> (u16, Arc<AtomicUsize>, Arc<parking_lot::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (count, seen) = (Arc::new(AtomicUsize::new(0)), Arc::default());
    let (c, s): (_, Arc<parking_lot::Mutex<Vec<String>>>) = (count.clone(), Arc::clone(&seen));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let s = s.clone();
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 16 * 1024];
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                s.lock()
                    .push(String::from_utf8_lossy(&buffer[..n]).into_owned());
                let _ = socket
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (port, count, seen)
}

/// A long poll for the connection `key` on `node`, as a client would send it.
async fn poll(node: &TestServer, key: &str) -> u16 {
    let url = format!("http://{}/client/?hub={HUB}&id={key}", node.addr);
    reqwest::Client::new()
        .get(url)
        .bearer_auth(node.token(HUB, Some("u")))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_node_address_makes_no_request_leave_the_node() {
    let redis = RedisServer::start();
    let url = redis.url();
    let prefix = "trust-b";
    let n1 = redis_node(&url, prefix, "n1", keyed()).await;
    let cluster = keyed().cluster_seal();
    let stranger = Seal::from_secrets(b"not-the-cluster-secret-0123456789abcdef", &[]);
    let (port, requests, seen) = recorder().await;
    let origin = format!("http://127.0.0.1:{port}");

    // Sealed with the cluster's key (a node's own answer could be no better), but a URL with
    // a path; then a plain origin, but not sealed with the cluster's key.
    let forgeries = [
        ("n8", cluster.clone(), format!("{origin}/evil")),
        ("n9", stranger.clone(), origin.clone()),
    ];
    let mut impostors = Vec::new();
    for (name, seal, answer) in forgeries {
        let listen = backplane(&url, prefix, cluster.clone()).await;
        let speak = backplane(&url, prefix, seal).await;
        listen.attach(&name.to_string(), Arc::new(Impostor { speak, url: answer }));
        listen.barrier(&name.to_string()).await;
        impostors.push(listen);
        assert_eq!(poll(&n1, &format!("key.{name}")).await, 404, "{name}");
    }
    assert_eq!(
        requests.load(Ordering::SeqCst),
        0,
        "a request left the node"
    );
    assert!(
        n1.metric("switchyard_cluster_addresses_refused_total")
            .await
            >= 1
    );

    // Only a sealed origin is followed, and what goes there carries no client credential.
    let listen = backplane(&url, prefix, cluster.clone()).await;
    let speak = backplane(&url, prefix, cluster.clone()).await;
    listen.attach(&"n7".to_string(), Arc::new(Impostor { speak, url: origin }));
    listen.barrier(&"n7".to_string()).await;
    let key = "key.n7";
    let url_with_token = format!(
        "http://{}/client/?hub={HUB}&id={key}&access_token={}",
        n1.addr,
        n1.token(HUB, Some("u"))
    );
    assert_eq!(poll(&n1, key).await, 404);
    let status = reqwest::get(url_with_token).await.unwrap().status();
    assert_eq!(status.as_u16(), 404);
    assert_eq!(requests.load(Ordering::SeqCst), 2, "both were passed on");
    for request in seen.lock().iter() {
        let lower = request.to_ascii_lowercase();
        assert!(!lower.contains("authorization:"), "{request}");
        assert!(!lower.contains("access_token"), "{request}");
        assert!(lower.contains("x-switchyard-assertion:"), "{request}");
    }
    n1.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_marked_as_passed_on_without_a_valid_assertion_is_refused() {
    let redis = RedisServer::start();
    let n1 = redis_node(&redis.url(), "trust-c", "n1", keyed()).await;
    let (_client, id) = RawClient::start(&n1, HUB, &n1.token(HUB, Some("u")), Format::Json).await;
    let url = format!("http://{}/client/?hub={HUB}&id={id}", n1.addr);
    for assertion in [None, Some("v1.4102444800.127.0.0.1.e30.AAAA")] {
        let mut request = reqwest::Client::new()
            .get(&url)
            .bearer_auth(n1.token(HUB, Some("u")))
            .header("x-switchyard-forwarded-by", "n2");
        if let Some(assertion) = assertion {
            request = request.header("x-switchyard-assertion", assertion);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 403, "{assertion:?}");
    }
    // The same request without the mark is the client's own.
    let status = reqwest::Client::new()
        .delete(&url)
        .bearer_auth(n1.token(HUB, Some("u")))
        .send()
        .await
        .unwrap()
        .status();
    assert_ne!(status.as_u16(), 403);
    n1.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_takes_the_client_address_from_the_assertion_not_forwarded_for() {
    let redis = RedisServer::start();
    let url = redis.url();
    let n1 = redis_node(&url, "trust-d", "n1", Config::default()).await;
    // n2 believes X-Forwarded-For from n1's address, as a node behind the same proxy might.
    let trusting = Config {
        trusted_proxies: vec!["127.0.0.1".into()],
        ..Config::default()
    };
    let n2 = redis_node(&url, "trust-d", "n2", trusting).await;
    let direct = switchyard_testkit::http::Http::for_user(&n2, HUB, "u");
    let id = direct.negotiate().await;
    // The first poll, through n1, with an address the client made up.
    let poll = reqwest::Client::new()
        .get(format!("http://{}/client/?hub={HUB}&id={id}", n1.addr))
        .bearer_auth(n1.token(HUB, Some("u")))
        .header("x-forwarded-for", "198.51.100.66")
        .send()
        .await
        .unwrap();
    assert_eq!(poll.status().as_u16(), 200);
    let handshake = direct
        .post(&id, b"{\"protocol\":\"json\",\"version\":1}\x1e")
        .await;
    assert_eq!(handshake.status().as_u16(), 200);
    assert_eq!(
        &direct.poll(&id).await.bytes().await.unwrap()[..],
        b"{}\x1e"
    );
    let mut admin = switchyard_testkit::Admin::open(&n2, "").await;
    let list = admin
        .invoke("SetFilter", &[json!({"hub": HUB})])
        .await
        .unwrap();
    assert_eq!(list["matched"], 1, "{list}");
    // n1 does not trust proxies: the client is its peer.
    assert_eq!(list["rows"][0]["address"], "127.0.0.1", "{list}");
    n1.stop().await;
    n2.stop().await;
}
