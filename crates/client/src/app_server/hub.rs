//! One hub's "connection container": its server-connection slots, the clients pinned to
//! them, pending acks and client results, and what to do with each service message.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use switchyard_service_protocol::{self as sp, CloseConnection, Extensions, Ping};
use tokio::sync::watch;

use super::acks::Acks;
use super::client::{Client, ClientEntry};
use super::config::AppServerConfig;
use super::link::Link;
use super::results::Results;

/// State shared by every hub of one app server.
pub struct ServerInfo {
    pub config: AppServerConfig,
    pub stopping: AtomicBool,
    /// Flips to `true` once on stop/abort; wakes back-off sleeps.
    pub stop_signal: watch::Sender<bool>,
    /// Number of handshaken server connections over all hubs.
    pub live: watch::Sender<usize>,
    /// Clients over all hubs.
    pub clients: AtomicUsize,
    next_link_id: AtomicU64,
}

impl ServerInfo {
    pub fn new(config: AppServerConfig) -> Self {
        ServerInfo {
            config,
            stopping: AtomicBool::new(false),
            stop_signal: watch::Sender::new(false),
            live: watch::Sender::new(0),
            clients: AtomicUsize::new(0),
            next_link_id: AtomicU64::new(1),
        }
    }

    pub fn server_id(&self) -> &str {
        &self.config.server_id
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    pub fn next_link_id(&self) -> u64 {
        self.next_link_id.fetch_add(1, Ordering::Relaxed)
    }
}

pub struct Hub {
    /// As configured (the app's spelling); URLs use it lower-cased.
    pub name: String,
    pub info: Arc<ServerInfo>,
    slots: RwLock<Vec<Option<Arc<Link>>>>,
    /// OnDemand slots reserved (dialling or connected).
    on_demand: Mutex<Vec<usize>>,
    round_robin: AtomicUsize,
    pub(super) clients: Mutex<HashMap<String, ClientEntry>>,
    pub acks: Acks,
    pub results: Results,
}

impl Hub {
    pub fn new(name: String, info: Arc<ServerInfo>) -> Self {
        let slots = vec![None; info.config.connections_per_hub];
        Hub {
            name,
            info,
            slots: RwLock::new(slots),
            on_demand: Mutex::default(),
            round_robin: AtomicUsize::new(0),
            clients: Mutex::default(),
            acks: Acks::new(),
            results: Results::default(),
        }
    }

    /// The fixed slots (OnDemand connections take slots past these).
    pub fn slot_count(&self) -> usize {
        self.info.config.connections_per_hub
    }

    /// A slot for an OnDemand connection: a free one past the fixed slots, or a new one;
    /// `None` when the hub is at `max_hub_server_connections`.
    pub fn reserve_on_demand_slot(&self) -> Option<usize> {
        let mut slots = self.slots.write();
        let fixed = self.info.config.connections_per_hub;
        let mut in_use = self.on_demand.lock();
        let used = slots[..fixed].iter().filter(|s| s.is_some()).count() + in_use.len();
        if self
            .info
            .config
            .max_hub_server_connections
            .is_some_and(|max| used >= max)
        {
            return None;
        }
        let slot = (fixed..slots.len())
            .find(|i| !in_use.contains(i))
            .unwrap_or_else(|| {
                slots.push(None);
                slots.len() - 1
            });
        in_use.push(slot);
        Some(slot)
    }

    pub fn release_on_demand_slot(&self, slot: usize) {
        self.on_demand.lock().retain(|s| *s != slot);
    }

    /// A handshaken connection takes its slot.
    pub fn attach(&self, slot: usize, link: Arc<Link>) {
        self.slots.write()[slot] = Some(link);
        self.info.live.send_modify(|n| *n += 1);
    }

    /// The session of `link` ended: free the slot and drop the clients it carried (the
    /// service closes them too).
    pub fn detach(&self, slot: usize, link: &Arc<Link>) {
        {
            let mut slots = self.slots.write();
            match &slots[slot] {
                Some(current) if current.id == link.id => slots[slot] = None,
                _ => return,
            }
        }
        self.info.live.send_modify(|n| *n = n.saturating_sub(1));
        let gone: Vec<String> = self
            .clients
            .lock()
            .iter()
            .filter(|(_, e)| e.client.link.id == link.id)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.forget_client(&id);
        }
    }

    /// Every live connection.
    pub fn links(&self) -> Vec<Arc<Link>> {
        self.slots.read().iter().flatten().cloned().collect()
    }

    pub fn has_link(&self) -> bool {
        self.slots
            .read()
            .iter()
            .flatten()
            .any(|link| link.is_writable())
    }

    /// The next writable connection in round-robin order (sends made outside a client's
    /// invocation).
    pub fn any_link(&self) -> Option<Arc<Link>> {
        let slots = self.slots.read();
        let n = slots.len();
        let start = self.round_robin.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .filter_map(|i| slots[(start + i) % n].as_ref())
            .find(|link| link.is_writable())
            .cloned()
    }

    pub fn client_count(&self) -> usize {
        self.clients.lock().len()
    }

    /// Drops all clients and slots at once (abort).
    pub fn clear(&self) {
        let ids: Vec<String> = self.clients.lock().keys().cloned().collect();
        for id in ids {
            self.forget_client(&id);
        }
        for slot in self.slots.write().iter_mut() {
            *slot = None;
        }
        self.acks.clear();
        self.results.clear();
    }

    pub(super) fn on_ping(&self, link: &Arc<Link>, ping: Ping) {
        if ping.get("echo").is_some() {
            link.send(ping);
        } else if ping.get("shutdown") == Some("finack") {
            link.set_finack();
        } else if let Some(instance) = ping.get("offline") {
            self.drop_instance(link, instance);
        }
    }

    /// A service instance went away (spec §1.6 `offline`): as the SDK does, the clients it
    /// announced over the connection the ping came on are gone.
    fn drop_instance(&self, link: &Link, instance: &str) {
        let gone: Vec<String> = self
            .clients
            .lock()
            .iter()
            .filter(|(_, e)| {
                e.client.link.id == link.id && e.client.instance_id.as_deref() == Some(instance)
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.forget_client(&id);
        }
    }

    /// `["#clientInHub", n, "#client", m]`: what the ASP.NET Core SDK sends as keep-alive.
    pub fn keep_alive_ping(&self, link: &Link) -> Ping {
        let in_hub = self.client_count().to_string();
        let on_link = link.clients.load(Ordering::Relaxed).to_string();
        Ping::new(&[("#clientInHub", &in_hub), ("#client", &on_link)])
    }

    pub(super) fn on_client_completion(&self, completion: sp::ClientCompletion) {
        let result = super::client::completion_result(&completion.protocol, &completion.payload);
        self.results.complete(&completion.invocation_id, result);
    }
}

/// Clients pinned to this server, by connection id.
impl Hub {
    /// CloseConnection from the service: the client is gone (or migrated away).
    pub fn on_close(&self, close: CloseConnection) {
        self.forget_client(&close.connection_id);
    }

    /// Removes a client; its worker ends and its pending client invocations fail.
    pub fn forget_client(&self, id: &str) {
        let removed = self.clients.lock().remove(id);
        if let Some(entry) = removed {
            entry.client.abandon_streams();
            entry.client.link.clients.fetch_sub(1, Ordering::Relaxed);
            self.info.clients.fetch_sub(1, Ordering::Relaxed);
            self.results.client_gone(id);
        }
    }

    /// Closes a client from this side (CloseConnection A→S) and forgets it.
    pub fn close_client(&self, client: &Client, error: &str) {
        client.link.send(CloseConnection {
            connection_id: client.id.clone(),
            error_message: error.to_owned(),
            headers: Vec::new(),
            ext: Extensions::default(),
        });
        self.forget_client(&client.id);
    }

    pub fn client(&self, id: &str) -> Option<Arc<Client>> {
        self.clients.lock().get(id).map(|e| e.client.clone())
    }
}
