//! Messages about the connection itself: pings (echo, status, servers, graceful shutdown)
//! and access-key requests.

use std::sync::Arc;

use switchyard_core::clock::unix_now_ms;
use switchyard_service_protocol::{
    AccessKeyRequest, AccessKeyResponse, Extensions, Ping, ServiceMessage,
};

use super::AppServers;
use crate::app_server::ServerConnection;

pub(super) fn ping(app: &AppServers, connection: &Arc<ServerConnection>, ping: Ping) {
    if ping.get("echo").is_some() {
        connection.send(&ServiceMessage::Ping(ping));
        return;
    }
    if ping.get("status").is_some() {
        // Always "has clients": an endpoint answered "0" long enough is set inactive by the
        // SDK and would stop getting negotiations.
        connection.send(&ServiceMessage::Ping(Ping::new(&[("status", "1")])));
        return;
    }
    let servers = &app.default_mode.servers;
    if ping.get("servers").is_some() {
        let ids = servers.server_ids(&connection.hub);
        let list = ids.iter().map(|s| &**s).collect::<Vec<_>>().join(";");
        connection.send(&ServiceMessage::Ping(Ping::new(&[(
            "servers",
            &format!("{}:{list}", unix_now_ms()),
        )])));
        return;
    }
    if let Some(fin) = ping.get("shutdown") {
        if !fin.starts_with("fin:") {
            return;
        }
        // Every connection of this app server stops taking new clients.
        let siblings: Vec<_> = servers
            .connections(&connection.hub)
            .into_iter()
            .filter(|sibling| sibling.server_id == connection.server_id)
            .collect();
        for sibling in &siblings {
            sibling.mark_draining();
        }
        connection.send(&ServiceMessage::Ping(Ping::new(&[("shutdown", "finack")])));
        if fin == "fin:1" {
            for sibling in &siblings {
                app.default_mode.relocate_clients(sibling, false);
            }
        }
    }
    // Keep-alives (`[3]`, `#clientInHub`…) need no answer: receiving them is the point.
}

/// AccessKeyRequest (Microsoft Entra ID): not offered.
pub(super) fn access_key(connection: &ServerConnection, request: AccessKeyRequest) {
    connection.send(&ServiceMessage::AccessKeyResponse(AccessKeyResponse {
        kid: request.kid,
        access_key: None,
        error_type: Some("NotSupported".into()),
        error_message: Some(
            "Microsoft Entra ID (AAD) access keys are not supported by this service; \
             use an access key in the connection string."
                .into(),
        ),
        ext: Extensions::default(),
    }));
}
