//! The service as a cluster: real nodes, each with its own Redis backplane (as separate
//! processes would have), on a real `redis-server` or Redis Cluster. The Redis backplane's
//! own behaviour is tested in its crate (`crates/backplane-redis/tests`); these are the
//! node's scenarios across nodes, one file per concern.
//!
//! # Layout
//! - `sends`: sends, REST calls and commands on one node reach clients on the others; the
//!   user-group table of a late node; failover of a Redis Cluster master; group limits.
//! - `dashboard`: a dashboard on one node sees, lists and closes every node's clients; a live
//!   trace covers every node.
//! - `throttling`: negotiates passed to another node count against the limit; a hung node.
//! - `default_mode`: app servers that know one node serve clients on every node.
//! - `trust`: only sealed backplane messages count; forged node addresses and forged
//!   passed-on requests are refused.

mod dashboard;
mod default_mode;
mod sends;
mod throttling;
mod trust;

use std::sync::Arc;

use switchyard_backplane::Backplane;
use switchyard_backplane_redis::{RedisBackplane, RedisSettings};
use switchyard_node::Config;
use switchyard_testkit::TestServer;

/// A node named `name` with `config`, on a Redis backplane at `url` whose keys start with
/// `prefix` (each test its own, so tests sharing a server do not hear each other).
async fn redis_node(url: &str, prefix: &str, name: &str, config: Config) -> TestServer {
    let mut settings = RedisSettings::new(url);
    settings.prefix = prefix.into();
    settings.seal = config.cluster_seal();
    let backplane: Arc<dyn Backplane> = RedisBackplane::connect(settings)
        .await
        .expect("the Redis backplane connects");
    TestServer::start_on(config, backplane, name).await
}
