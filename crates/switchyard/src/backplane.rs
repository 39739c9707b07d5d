//! The one place that maps `cluster.backplane`'s scheme to a backend. The node takes any
//! `Backplane`; a new backend is a crate and one arm in [`Kind::of`] and [`join`].

use std::sync::Arc;

use switchyard_backplane_redis::{RedisBackplane, RedisSettings};
use switchyard_node::{Node, ValidConfig};

/// The backends this build knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One Redis (`redis://`, `rediss://`) or a Redis Cluster (`redis-cluster://`,
    /// `rediss-cluster://`).
    Redis,
}

impl Kind {
    /// The backend `url` names, or an error listing the schemes this build knows. The URL is
    /// not echoed (it may carry a password): only its scheme.
    pub fn of(url: &str) -> Result<Kind, String> {
        let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
        match scheme {
            "redis" | "rediss" | "redis-cluster" | "rediss-cluster" => Ok(Kind::Redis),
            other => Err(format!(
                "cluster.backplane: no backplane for the scheme {other:?}; this build knows \
                 redis:// and rediss:// (one Redis, rediss with TLS) and redis-cluster:// and \
                 rediss-cluster:// (a Redis Cluster)"
            )),
        }
    }
}

/// `url` with any password replaced, for logs and status lines.
pub fn redact(url: &str) -> String {
    match Kind::of(url) {
        Ok(Kind::Redis) => switchyard_backplane_redis::redact(url),
        Err(_) => "<backplane URL>".to_string(),
    }
}

/// Connects to the backplane `url` names and makes this node, `node_id`, a member.
pub async fn join(config: &ValidConfig, url: &str, node_id: String) -> Result<Arc<Node>, String> {
    match Kind::of(url)? {
        Kind::Redis => {
            let mut settings = RedisSettings::new(url.to_string());
            settings.prefix = config.cluster.prefix.clone();
            settings.seal = config.cluster_seal();
            let backplane = RedisBackplane::connect(settings)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Node::with_backplane(config.clone(), backplane, node_id))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_pick_the_backend_and_others_are_refused_without_the_url() {
        for url in [
            "redis://h:1",
            "rediss://h:1",
            "redis-cluster://a:1,b:2",
            "rediss-cluster://a:1",
        ] {
            assert_eq!(Kind::of(url), Ok(Kind::Redis), "{url}");
        }
        let error = Kind::of("nats://user:secret@h:4222").unwrap_err();
        assert!(
            error.contains("\"nats\"") && error.contains("redis://"),
            "{error}"
        );
        assert!(!error.contains("secret"), "{error}");
        assert_eq!(redact("nats://user:secret@h:4222"), "<backplane URL>");
        assert!(!redact("redis://:secret@h:6379").contains("secret"));
    }
}
