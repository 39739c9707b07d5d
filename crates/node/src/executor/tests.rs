use std::sync::Arc;

use switchyard_backplane::{Backplane, MemoryBackplane};
use switchyard_core::{ConnectionId, GroupName, HubName, UserId};

use super::Executor;
use crate::cluster::Cluster;
use crate::command::{Check, Command, Missing};
use crate::config::Config;
use crate::live_trace::Tracer;
use crate::metrics::Metrics;

fn executor(backplane: Arc<dyn Backplane>) -> (Arc<Cluster>, Executor) {
    let config = Config::default().validate().unwrap();
    let metrics = Arc::new(Metrics::default());
    let tracer = Arc::new(Tracer::new(&config.dashboard));
    let cluster = Arc::new(Cluster::new(
        &config,
        backplane,
        "n1".into(),
        metrics.clone(),
        tracer.clone(),
    ));
    let executor = Executor::new(cluster.clone(), metrics, tracer, 0);
    (cluster, executor)
}

/// The router and the backplane refer to each other; dropping the node's cluster must free
/// both (found by the fuzz targets, which make a node per input).
#[test]
fn a_dropped_node_is_freed() {
    let backplane: Arc<dyn Backplane> = Arc::new(MemoryBackplane::new());
    let (cluster, executor) = executor(backplane.clone());
    let router = Arc::downgrade(executor.router());
    drop(executor);
    drop(cluster);
    assert!(router.upgrade().is_none(), "the router outlived its node");
    drop(backplane);
}

#[tokio::test]
async fn misses_name_what_is_missing() {
    let (cluster, executor) = executor(Arc::new(MemoryBackplane::new()));
    let hub = HubName::new("chat", None).unwrap();
    assert_eq!(
        executor
            .execute(&hub, Command::add_to_group("c1", "g").unwrap())
            .await,
        Err(Missing::Connection(ConnectionId::new("c1").unwrap()))
    );
    assert_eq!(
        executor
            .execute(&hub, Check::user_in_group("u", "g").unwrap())
            .await,
        Err(Missing::UserInGroup(
            UserId::new("u").unwrap(),
            GroupName::new("g").unwrap()
        ))
    );
    // A user-group membership needs no connection.
    assert_eq!(
        executor
            .execute(&hub, Command::user_join_group("u", "g", None).unwrap())
            .await,
        Ok(())
    );
    assert_eq!(
        executor
            .execute(&hub, Check::user_in_group("u", "g").unwrap())
            .await,
        Ok(())
    );
    assert_eq!(cluster.asks_in_flight(), 0);
}
