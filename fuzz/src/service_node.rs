//! Helpers of the targets that drive a whole `switchyard-node` service in process
//! (`rest_body`, `negotiate_query`, `client_session`).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_node::{Config, Node};

/// A fresh node: every run starts from the same empty state.
pub(crate) fn node(config: Config) -> Arc<Node> {
    switchyard_node::fuzzing::node(config)
}

pub(crate) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A token for `aud`, signed with the key a default node verifies with.
pub(crate) fn token(aud: &str) -> String {
    TokenBuilder::new(aud).sign(EMULATOR_ACCESS_KEY, now())
}

/// The REST error body, `{"code":…,"message":…}`, both non-empty strings; returns them.
pub(crate) fn rest_error(status: u16, body: &[u8]) -> (String, String) {
    let value: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("a {status} REST error body is not JSON ({e}): {body:?}"));
    let field = |name: &str| {
        value
            .get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| panic!("a {status} REST error body has no '{name}': {value}"))
            .to_string()
    };
    (field("code"), field("message"))
}

/// Percent-encodes every byte, so that decoding gives `text` back whatever it holds.
pub(crate) fn percent_all(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}
