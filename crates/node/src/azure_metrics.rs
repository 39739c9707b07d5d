//! The metrics Azure SignalR Service shows (connection count, messages and traffic in and out,
//! message count in 2 KB units, server load, connection quota utilization), read from the
//! router's per-hub counters and the process sampler at scrape time: nothing is looked up or
//! labelled per message.
//!
//! Per-hub series carry a `hub` label. Their number is capped (`metrics.max_hub_series`): the
//! first hubs seen (in name order within a scrape) keep their own label for the life of the
//! process, and every later hub is summed into `hub="_other"`, so each series stays
//! monotonic and the cardinality stays bounded whatever names clients use.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, NoLabelSet};
use prometheus_client::metrics::MetricType;
use switchyard_router::{Router, TrafficTotals};

use crate::process;

/// The `hub` label value of the hubs past the cap.
pub const OTHER_HUBS: &str = "_other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HubLabel {
    hub: String,
}

/// What a scrape reads; set once the node's router exists.
struct Source {
    router: Arc<Router>,
    max_hub_series: usize,
    /// `limits.max_client_connections`; 0 = unlimited (no quota series).
    max_client_connections: usize,
}

/// The collector registered in the node's registry (see [`crate::metrics::Metrics`]).
#[derive(Default)]
pub struct AzureMetrics {
    source: OnceLock<Source>,
    /// Hubs that have their own label, in the order they got it.
    labelled: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for AzureMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureMetrics").finish_non_exhaustive()
    }
}

/// One hub's (or `_other`'s) figures at scrape time.
#[derive(Default)]
struct HubRow {
    connections: u64,
    users: u64,
    groups: u64,
    traffic: TrafficTotals,
}

impl AzureMetrics {
    /// Starts reading `router`'s hubs. Later calls are ignored (one router per node).
    pub fn watch(&self, router: Arc<Router>, max_hub_series: usize, max_client_connections: usize) {
        let _ = self.source.set(Source {
            router,
            max_hub_series,
            max_client_connections,
        });
    }

    /// Every hub's row, those past the cap summed under [`OTHER_HUBS`] (last).
    fn rows(&self, source: &Source) -> Vec<(String, HubRow)> {
        let mut hubs = source.router.hubs();
        hubs.sort_by(|a, b| a.name().as_str().cmp(b.name().as_str()));
        let mut labelled = self.labelled.lock();
        let mut rows = Vec::with_capacity(hubs.len().min(source.max_hub_series) + 1);
        let mut other: Option<HubRow> = None;
        for hub in hubs {
            let row = HubRow {
                connections: hub.connection_count() as u64,
                users: hub.user_count() as u64,
                groups: hub.group_count() as u64,
                traffic: hub.traffic().snapshot(),
            };
            let name = hub.name().as_str();
            let own = labelled.contains(name)
                || (labelled.len() < source.max_hub_series && labelled.insert(name.to_owned()));
            if own {
                rows.push((name.to_owned(), row));
            } else {
                let sum = other.get_or_insert_with(HubRow::default);
                sum.connections += row.connections;
                sum.users += row.users;
                sum.groups += row.groups;
                sum.traffic += row.traffic;
            }
        }
        if let Some(other) = other {
            rows.push((OTHER_HUBS.to_owned(), other));
        }
        rows
    }
}

/// A per-hub series: its name (without prefix or `_total`), help, type and value.
type Column = (&'static str, &'static str, MetricType, fn(&HubRow) -> u64);

const COLUMNS: &[Column] = &[
    (
        "hub_connections",
        "Client connections in the hub on this node, after their handshake (Azure: Connection Count)",
        MetricType::Gauge,
        |r| r.connections,
    ),
    (
        "hub_users",
        "Users with at least one connection in the hub on this node",
        MetricType::Gauge,
        |r| r.users,
    ),
    (
        "hub_groups",
        "Groups with at least one connection of this node in the hub",
        MetricType::Gauge,
        |r| r.groups,
    ),
    (
        "hub_inbound_messages",
        "Hub messages received from clients (pings, closes, acks and sequence messages excluded)",
        MetricType::Counter,
        |r| r.traffic.messages_in,
    ),
    (
        "hub_outbound_messages",
        "Hub messages delivered to clients, one per recipient (pings excluded)",
        MetricType::Counter,
        |r| r.traffic.messages_out,
    ),
    (
        "hub_inbound_message_units",
        "Inbound hub messages in Azure's 2 KB billing units (ceil(bytes / 2048), at least 1 each)",
        MetricType::Counter,
        |r| r.traffic.units_in,
    ),
    (
        "hub_outbound_message_units",
        "Outbound hub messages in Azure's 2 KB billing units (Azure: Message Count)",
        MetricType::Counter,
        |r| r.traffic.units_out,
    ),
    (
        "hub_inbound_bytes",
        "Bytes of inbound hub messages, SignalR framing included (Azure: Inbound Traffic)",
        MetricType::Counter,
        |r| r.traffic.bytes_in,
    ),
    (
        "hub_outbound_bytes",
        "Bytes of outbound hub messages, SignalR framing included (Azure: Outbound Traffic)",
        MetricType::Counter,
        |r| r.traffic.bytes_out,
    ),
];

/// What the registry holds: the registry owns its collectors, the node keeps the shared half
/// to call [`AzureMetrics::watch`] once its router exists.
#[derive(Debug)]
struct Shared(Arc<AzureMetrics>);

impl Collector for Shared {
    fn encode(&self, encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

impl AzureMetrics {
    /// A collector for a registry that reads this.
    pub fn collector(self: &Arc<Self>) -> Box<dyn Collector> {
        Box::new(Shared(self.clone()))
    }
}

impl Collector for AzureMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let sample = process::sample();
        let mut metric = encoder.encode_descriptor(
            "server_load",
            "CPU this process used over the last second, in percent of the cores it may use (Azure: Server Load)",
            None,
            MetricType::Gauge,
        )?;
        metric.encode_gauge(&sample.cpu_percent)?;
        let mut metric = encoder.encode_descriptor(
            "process_cpu_seconds",
            "CPU time this process used since it started (user + system), in seconds",
            None,
            MetricType::Counter,
        )?;
        metric.encode_counter::<NoLabelSet, _, u64>(&sample.cpu_seconds, None)?;
        let mut metric = encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory of this process, in bytes",
            None,
            MetricType::Gauge,
        )?;
        metric.encode_gauge(&sample.rss_bytes)?;

        let Some(source) = self.source.get() else {
            return Ok(());
        };
        let rows = self.rows(source);
        if source.max_client_connections > 0 {
            let connected: u64 = rows.iter().map(|(_, row)| row.connections).sum();
            let percent = connected as f64 * 100.0 / source.max_client_connections as f64;
            let mut metric = encoder.encode_descriptor(
                "connection_quota_utilization",
                "Client connections in hubs as a percentage of limits.max_client_connections (Azure: Connection Quota Utilization)",
                None,
                MetricType::Gauge,
            )?;
            metric.encode_gauge(&percent)?;
        }
        for (name, help, metric_type, value) in COLUMNS {
            let mut metric = encoder.encode_descriptor(name, help, None, *metric_type)?;
            for (hub, row) in &rows {
                let label = HubLabel { hub: hub.clone() };
                let mut series = metric.encode_family(&label)?;
                match metric_type {
                    MetricType::Counter => {
                        series.encode_counter::<NoLabelSet, _, u64>(&value(row), None)?
                    }
                    _ => series.encode_gauge(&value(row))?,
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use prometheus_client::registry::Registry;
    use switchyard_core::{ConnectionId, HubName, Payloads, Protocol, Target};
    use switchyard_router::{Connection, NoInterest};

    fn scrape(metrics: AzureMetrics) -> String {
        let mut registry = Registry::with_prefix("switchyard");
        registry.register_collector(Box::new(metrics));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn hubs_past_the_cap_are_summed_under_other() {
        let router = Arc::new(Router::new(Arc::new(NoInterest)));
        for (i, name) in ["alpha", "beta", "gamma"].into_iter().enumerate() {
            let hub = router.hub(&HubName::new(name, None).unwrap());
            let connection = Arc::new(Connection::new(
                ConnectionId::new(&format!("c{i}")).unwrap(),
                None,
                1 << 20,
            ));
            connection.set_protocol(Protocol::Json);
            assert!(hub.add_connection(connection));
            let payloads = Payloads::new().with(Protocol::Json, Bytes::from(vec![b'x'; 3000]));
            hub.send(&Target::All { excluded: vec![] }, &payloads);
        }
        let metrics = AzureMetrics::default();
        metrics.watch(router.clone(), 1, 4);
        let text = scrape(metrics);
        for line in [
            "switchyard_hub_connections{hub=\"alpha\"} 1",
            "switchyard_hub_connections{hub=\"_other\"} 2",
            "switchyard_hub_outbound_messages_total{hub=\"alpha\"} 1",
            "switchyard_hub_outbound_message_units_total{hub=\"_other\"} 4",
            "switchyard_hub_outbound_bytes_total{hub=\"_other\"} 6000",
            "switchyard_connection_quota_utilization 75.0",
            "# TYPE switchyard_server_load gauge",
            "# TYPE switchyard_process_resident_memory_bytes gauge",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
        assert!(!text.contains("hub=\"beta\""), "{text}");
    }
}
