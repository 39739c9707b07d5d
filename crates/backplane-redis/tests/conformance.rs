//! The backplane conformance suite against a real `redis-server` and against a real Redis
//! Cluster of three masters (sharded pub/sub): two backplane instances (two "processes")
//! share it, each check on a fresh channel prefix.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use switchyard_backplane::{conformance, Backplane};
use switchyard_backplane_redis::{RedisBackplane, RedisSettings};
use switchyard_testkit::{RedisCluster, RedisServer};

#[test]
fn redis_backplane_conforms() {
    let redis = RedisServer::start();
    conforms_on(redis.url());
}

#[test]
fn redis_cluster_backplane_conforms() {
    let redis = RedisCluster::start();
    conforms_on(redis.url());
}

/// The suite with two backplane instances (two "processes") on `url`, each check on a fresh
/// channel prefix.
fn conforms_on(url: String) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let round = AtomicUsize::new(0);
    conformance::run_all(|| {
        let mut settings = RedisSettings::new(url.clone());
        settings.prefix = format!("t{}", round.fetch_add(1, Ordering::Relaxed));
        let near: Arc<dyn Backplane> = runtime
            .block_on(RedisBackplane::connect(settings.clone()))
            .unwrap();
        let far: Arc<dyn Backplane> = runtime.block_on(RedisBackplane::connect(settings)).unwrap();
        (near, far)
    });
}

#[test]
fn bad_urls_and_unreachable_redis_are_clear_errors() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let error = runtime
        .block_on(RedisBackplane::connect(RedisSettings::new("http://x")))
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("not valid"), "{error}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = runtime
        .block_on(RedisBackplane::connect(RedisSettings::new(format!(
            "redis://:secret@127.0.0.1:{port}"
        ))))
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("cannot reach redis"), "{error}");
    assert!(!error.contains("secret"), "password leaked: {error}");
}

#[test]
fn undecodable_messages_are_counted_and_dropped() {
    let redis = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let backplane = runtime
        .block_on(RedisBackplane::connect(RedisSettings::new(redis.url())))
        .unwrap();
    struct Nothing;
    impl switchyard_backplane::Sink for Nothing {
        fn receive(&self, _: &Arc<switchyard_core::Message>) {
            panic!("garbage was delivered")
        }
    }
    let node = "n1".to_string();
    backplane.attach(&node, Arc::new(Nothing));
    runtime.block_on(backplane.barrier(&node));
    // Not sealed: dropped before decoding, as not from a node of this cluster.
    assert_eq!(redis.cli(&["PUBLISH", "sy:all", "garbage"]), "1");
    let stats = backplane.stats();
    let counted = |counter: &std::sync::atomic::AtomicU64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while counter.load(Ordering::Relaxed) == 0 {
            assert!(std::time::Instant::now() < deadline, "not counted");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    };
    counted(&stats.unauthenticated);
    // Sealed with the cluster's key (the default one here), but no envelope.
    let seal = switchyard_backplane::envelope::Seal::development();
    let mut sealed = b"garbage".to_vec();
    sealed.extend_from_slice(&seal.tag(&[b"garbage"]));
    raw_publish(redis.port, "sy:all", &sealed);
    counted(&stats.decode_errors);
    assert_eq!(stats.unauthenticated.load(Ordering::Relaxed), 1);
}

/// PUBLISH with a binary payload (RESP by hand; redis-cli takes text arguments).
fn raw_publish(port: u16, channel: &str, payload: &[u8]) {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut command = b"*3\r\n$7\r\nPUBLISH\r\n".to_vec();
    for part in [channel.as_bytes(), payload] {
        command.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        command.extend_from_slice(part);
        command.extend_from_slice(b"\r\n");
    }
    socket.write_all(&command).unwrap();
    let mut reply = [0u8; 16];
    let n = socket.read(&mut reply).unwrap();
    assert_eq!(&reply[..n], b":1\r\n");
}

/// A Redis outage longer than the client library's default reconnect attempts (about 13 s):
/// once Redis is back, the node hears the cluster again (it reconnects and resubscribes by
/// itself; messages published during the outage are lost, as docs/cluster.md says).
#[test]
fn a_node_hears_the_cluster_again_after_a_long_redis_outage() {
    use std::time::{Duration, Instant};
    let mut redis = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let near = runtime
        .block_on(RedisBackplane::connect(RedisSettings::new(redis.url())))
        .unwrap();
    #[derive(Default)]
    struct Count(AtomicUsize);
    impl switchyard_backplane::Sink for Count {
        fn receive(&self, _: &Arc<switchyard_core::Message>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
    let count = Arc::new(Count::default());
    let node = "n1".to_string();
    near.attach(&node, count.clone());
    runtime.block_on(near.barrier(&node));
    redis.restart_after(Duration::from_secs(16));
    let far = runtime
        .block_on(RedisBackplane::connect(RedisSettings::new(redis.url())))
        .unwrap();
    let message = Arc::new(switchyard_core::Message::UserLeaveGroup {
        hub: switchyard_core::HubName::new("chat", None).unwrap(),
        user: switchyard_core::UserId::new("u").unwrap(),
        group: None,
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while count.0.load(Ordering::Relaxed) == 0 {
        assert!(
            Instant::now() < deadline,
            "the node never heard the cluster again"
        );
        far.publish(&[switchyard_core::Channel::All], message.clone());
        std::thread::sleep(Duration::from_millis(200));
    }
}
