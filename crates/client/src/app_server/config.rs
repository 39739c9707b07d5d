//! What an app server is told at start: where the service is, which hubs, how many
//! connections, and how it shuts down.

use std::fmt::Write as _;

use rand::RngCore;
use switchyard_auth::ConnectionString;

/// What [`AppServer::stop`](super::AppServer::stop) asks of the service (spec §1.6 `fin:N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShutdownMode {
    /// No shutdown handshake: the sockets are simply closed (the SDK's default).
    #[default]
    Off,
    /// `fin:1`: the service moves this server's clients to other app servers.
    MigrateClients,
    /// `fin:2`: no new clients; wait (bounded) until the current ones leave.
    WaitForClientsClose,
}

impl ShutdownMode {
    /// The `N` of the `["shutdown","fin:N"]` ping.
    pub fn fin_code(self) -> u8 {
        match self {
            ShutdownMode::Off => 0,
            ShutdownMode::MigrateClients => 1,
            ShutdownMode::WaitForClientsClose => 2,
        }
    }

    /// The HandshakeRequest `migrationLevel`: 1 only when clients may be migrated.
    pub fn migration_level(self) -> i32 {
        i32::from(self == ShutdownMode::MigrateClients)
    }
}

/// Configuration of one app-server peer.
#[derive(Debug, Clone)]
pub struct AppServerConfig {
    pub connection_string: ConnectionString,
    /// Hub names as the app spells them; URLs and audiences use them lower-cased.
    pub hubs: Vec<String>,
    /// Fixed ("Default" type) server connections per hub; the SDK's default is 5.
    pub connections_per_hub: usize,
    /// Stable id of this app server: `X-ASRS-Server-Id`, the server token's `nameid`,
    /// and `asrs.s.sn` in the client tokens it issues.
    pub server_id: String,
    pub graceful_shutdown: ShutdownMode,
    /// Most connections per hub, OnDemand ones (opened when the service asks, by a `target`
    /// ping) included, like the SDK's `MaxHubServerConnectionCount`. `None`: no cap.
    pub max_hub_server_connections: Option<usize>,
    /// Lets the service offer stateful reconnect to this app server's clients (the SDK's
    /// `allowStatefulReconnects`; off by default there too).
    pub allow_stateful_reconnects: bool,
    /// Certificate authorities trusted for a wss service beyond the public roots.
    pub tls_roots: crate::TlsRoots,
}

impl AppServerConfig {
    /// Defaults as the SDK has them: hub `bench`, 5 connections, a fresh server id,
    /// graceful shutdown off.
    pub fn new(connection_string: ConnectionString) -> Self {
        AppServerConfig {
            connection_string,
            hubs: vec!["bench".to_owned()],
            connections_per_hub: 5,
            server_id: default_server_id(),
            graceful_shutdown: ShutdownMode::Off,
            max_hub_server_connections: None,
            allow_stateful_reconnects: false,
            tls_roots: crate::TlsRoots::default(),
        }
    }
}

/// `{host name}_{32 hex digits}`, like the SDK's `{MachineName}_{Guid:N}`.
pub fn default_server_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "switchyard".to_owned());
    format!("{host}_{}", random_hex(16))
}

/// A random GUID-shaped string (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`), used for the
/// per-connection `cid`.
pub fn new_guid() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex_of(&bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// `n` random bytes as lower-case hex.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    rand::rng().fill_bytes(&mut bytes);
    hex_of(&bytes)
}

fn hex_of(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_shape() {
        let g = new_guid();
        let parts: Vec<_> = g.split('-').map(str::len).collect();
        assert_eq!(parts, [8, 4, 4, 4, 12]);
        assert_eq!(&g[14..15], "4");
    }

    #[test]
    fn server_id_shape() {
        let id = default_server_id();
        let (_, hex) = id.rsplit_once('_').unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn modes() {
        assert_eq!(ShutdownMode::MigrateClients.migration_level(), 1);
        assert_eq!(ShutdownMode::WaitForClientsClose.migration_level(), 0);
        assert_eq!(ShutdownMode::WaitForClientsClose.fin_code(), 2);
    }
}
