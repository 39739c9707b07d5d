//! The guide's capacity arithmetic: what a load needs, which Azure unit carries it, and how it
//! compares with what a benchmark measured.
//!
//! # Formulas
//!
//! For one load (the guide's `inboundBandwidth = inboundConnections × messageSize / sendInterval`
//! and its outbound twin, <https://learn.microsoft.com/azure/azure-signalr/signalr-concept-performance>):
//!
//! - inbound messages/s = senders / send interval;
//! - outbound messages/s = inbound × fan-out, where fan-out is 1 for echo, send to connection and
//!   REST send to user (one connection per user, as in the guide's runs), every connection for
//!   broadcast and REST broadcast (the guide's 2 broadcasts/s to 1,000 connections are 2,000
//!   outbound), and the group size for send to group;
//! - bandwidth = messages/s × counted size, where the counted size is the message size but at
//!   least 1,024 bytes (the guide: a message under 1,024 bytes performs like a 1,024-byte one);
//! - billed outbound messages/s = outbound × ⌈size / 2 KB⌉, at least 1 per message ("messages
//!   larger than 2 KB are counted as multiple messages of 2 KB each",
//!   <https://learn.microsoft.com/azure/azure-signalr/signalr-concept-messages-and-connections>).
//!
//! # Picking a unit
//!
//! A unit covers loads when, for that unit's column of each load's table, the connections fit and
//! the inbound and outbound bandwidth fit. A table's capacity is its published message rate × the
//! 2,048-byte size it was measured with, so at 2 KB this is a plain message-rate comparison; larger
//! messages need proportionally more, and messages of 1 KB or less get at most twice the published
//! rate. For several loads (the guide's "mixed use cases": split, compute each, add up), each
//! load's bandwidth is taken as a share of its own scenario's capacity and the shares add up:
//! Σ inbound shares ≤ 1, Σ outbound shares ≤ 1, Σ connections ≤ the unit's. For one load this is
//! exactly the per-table comparison. Only units with a column in every involved table are
//! candidates (in the current guide: send to connection has Unit20 but no Unit10; the others the
//! reverse).
//!
//! Inbound caps: where a table's inbound rate is the fixed trickle the run sent (broadcast, big
//! group, REST broadcast), the cap is echo's inbound (REST send to user's for REST broadcast), see
//! [`GuideScenario::inbound_ceiling`].
//!
//! Groups with fewer than [`guide::SMALL_GROUP_LIMIT`] (20) members use the small-group table,
//! larger ones the big-group table.

use serde::Serialize;

use crate::guide::{self, Guide, GuideScenario, Row};
use crate::report::{Report, Step};
use crate::scenario::Scenario;

/// Measured rates within this fraction below a published figure still count as reaching it
/// (a run paced at exactly the published rate measures a hair under it).
pub const MEASUREMENT_TOLERANCE: f64 = 0.01;

/// The guide's table for a benchmark scenario (`send-to-group` needs the group size).
pub fn guide_scenario(scenario: Scenario, group_size: Option<u64>) -> Option<GuideScenario> {
    Some(match scenario {
        Scenario::Echo => GuideScenario::Echo,
        Scenario::Broadcast => GuideScenario::Broadcast,
        Scenario::SendToGroup if group_size? < guide::SMALL_GROUP_LIMIT => {
            GuideScenario::SmallGroup
        }
        Scenario::SendToGroup => GuideScenario::BigGroup,
        Scenario::SendToConnection => GuideScenario::SendToConnection,
        Scenario::RestBroadcast => GuideScenario::RestBroadcast,
        Scenario::RestSendToUser => GuideScenario::RestSendToUser,
        // Our own scenarios: the guide publishes no table for them.
        _ => return None,
    })
}

/// The size a message counts as for bandwidth: its own, but at least 1,024 bytes.
pub fn counted_size(message_size: u64) -> u64 {
    message_size.max(guide::MIN_COUNTED_SIZE)
}

/// Billing messages one message of this size counts as (2 KB each, at least one).
pub fn billed_messages(message_size: u64) -> u64 {
    message_size.div_ceil(guide::MESSAGE_SIZE).max(1)
}

/// A steady load of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Load {
    pub scenario: Scenario,
    /// Client connections held.
    pub connections: u64,
    /// Connections (REST callers for REST scenarios) that each send one message per interval.
    pub senders: u64,
    /// Payload bytes per message.
    pub message_size: u64,
    pub send_interval_ms: f64,
    /// Members per group (send-to-group).
    pub group_size: Option<u64>,
    /// Number of groups (send-to-group), for the record.
    pub groups: Option<u64>,
}

impl Load {
    /// A load with the guide's defaults: every connection sends a 2,048-byte message per second.
    pub fn new(scenario: Scenario, connections: u64) -> Load {
        Load {
            scenario,
            connections,
            senders: connections,
            message_size: guide::MESSAGE_SIZE,
            send_interval_ms: guide::SEND_INTERVAL_MS as f64,
            group_size: None,
            groups: None,
        }
    }

    /// Refuses loads the formulas cannot mean.
    pub fn validate(&self) -> Result<(), String> {
        let name = self.scenario.name();
        if !self.scenario.is_planned() {
            return Err(format!(
                "{name}: Azure's performance guide publishes no figures for it"
            ));
        }
        if self.connections == 0 {
            return Err(format!("{name}: connections must be at least 1"));
        }
        if !(self.send_interval_ms.is_finite() && self.send_interval_ms > 0.0) {
            return Err(format!("{name}: the send interval must be more than 0"));
        }
        if !self.scenario.is_rest() && self.senders > self.connections {
            return Err(format!(
                "{name}: senders ({}) cannot exceed connections ({})",
                self.senders, self.connections
            ));
        }
        match (self.scenario, self.group_size) {
            (Scenario::SendToGroup, None) => {
                return Err(format!(
                    "{name}: needs a group size (or a number of groups)"
                ))
            }
            (Scenario::SendToGroup, Some(size)) if size == 0 || size > self.connections => {
                return Err(format!(
                    "{name}: the group size ({size}) must be between 1 and connections ({})",
                    self.connections
                ))
            }
            (Scenario::SendToGroup, Some(_)) => {}
            (_, Some(_)) => {
                return Err(format!(
                    "{name}: a group size only applies to send-to-group"
                ))
            }
            (_, None) if self.groups.is_some() => {
                return Err(format!("{name}: groups only apply to send-to-group"))
            }
            (_, None) => {}
        }
        Ok(())
    }

    pub fn guide_scenario(&self) -> GuideScenario {
        guide_scenario(self.scenario, self.group_size).unwrap_or(GuideScenario::SmallGroup)
    }

    /// Deliveries per message sent.
    pub fn fan_out(&self) -> u64 {
        match self.scenario {
            Scenario::Echo
            | Scenario::SendToConnection
            | Scenario::RestSendToUser
            | Scenario::RestSendToConnection
            | Scenario::JoinLeaveGroup
            | Scenario::RestJoinLeaveGroup => 1,
            Scenario::Broadcast | Scenario::RestBroadcast => self.connections,
            Scenario::SendToGroup
            | Scenario::RestSendToGroup
            | Scenario::ChatRoom
            | Scenario::RestChatRoom => self.group_size.unwrap_or(1),
            Scenario::ConnectRate | Scenario::Idle => 0,
        }
    }

    pub fn traffic(&self) -> Traffic {
        let inbound = self.senders as f64 * 1_000.0 / self.send_interval_ms;
        Traffic::of(inbound, inbound * self.fan_out() as f64, self.message_size)
    }
}

/// Messages and bytes per second through the service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Traffic {
    pub inbound_per_s: f64,
    pub outbound_per_s: f64,
    /// Inbound messages/s × counted size (under 1 KB counts as 1 KB).
    pub inbound_bytes_per_s: f64,
    /// Outbound messages/s × counted size.
    pub outbound_bytes_per_s: f64,
    /// Outbound messages/s as billed (2 KB pieces).
    pub billed_outbound_per_s: f64,
}

impl Traffic {
    pub fn of(inbound_per_s: f64, outbound_per_s: f64, message_size: u64) -> Traffic {
        let size = counted_size(message_size) as f64;
        Traffic {
            inbound_per_s,
            outbound_per_s,
            inbound_bytes_per_s: inbound_per_s * size,
            outbound_bytes_per_s: outbound_per_s * size,
            billed_outbound_per_s: outbound_per_s * billed_messages(message_size) as f64,
        }
    }

    fn add(&mut self, other: &Traffic) {
        self.inbound_per_s += other.inbound_per_s;
        self.outbound_per_s += other.outbound_per_s;
        self.inbound_bytes_per_s += other.inbound_bytes_per_s;
        self.outbound_bytes_per_s += other.outbound_bytes_per_s;
        self.billed_outbound_per_s += other.billed_outbound_per_s;
    }
}

/// What one load needs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadPlan {
    #[serde(flatten)]
    pub load: Load,
    /// The guide's table it is compared with.
    pub guide_scenario: GuideScenario,
    pub fan_out: u64,
    pub counted_message_size: u64,
    #[serde(flatten)]
    pub traffic: Traffic,
    /// The smallest published unit that carries this load alone.
    pub azure_unit: Option<u32>,
}

/// What all loads together need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TotalPlan {
    pub connections: u64,
    #[serde(flatten)]
    pub traffic: Traffic,
    /// The smallest published unit that carries every load at once.
    pub azure_unit: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub guide: &'static str,
    pub loads: Vec<LoadPlan>,
    pub total: TotalPlan,
}

/// Plans `loads` against `guide`. `total_connections` overrides the sum of the loads'
/// connections (for loads that share connections).
pub fn plan(guide: &Guide, loads: &[Load], total_connections: Option<u64>) -> Plan {
    let mut total = Traffic::default();
    let plans: Vec<LoadPlan> = loads
        .iter()
        .map(|load| {
            let traffic = load.traffic();
            total.add(&traffic);
            LoadPlan {
                load: load.clone(),
                guide_scenario: load.guide_scenario(),
                fan_out: load.fan_out(),
                counted_message_size: counted_size(load.message_size),
                traffic,
                azure_unit: smallest_unit(guide, std::slice::from_ref(load), load.connections),
            }
        })
        .collect();
    let connections =
        total_connections.unwrap_or_else(|| loads.iter().map(|l| l.connections).sum());
    Plan {
        guide: guide.name,
        total: TotalPlan {
            connections,
            traffic: total,
            azure_unit: smallest_unit(guide, loads, connections),
        },
        loads: plans,
    }
}

/// Shares of unit `unit`'s capacity the loads use together: (inbound, outbound, connections).
/// `None` when some load's table has no column for that unit.
pub fn utilisation(
    guide: &Guide,
    unit: u32,
    loads: &[Load],
    connections: u64,
) -> Option<(f64, f64, f64)> {
    let (mut inbound, mut outbound) = (0.0, 0.0);
    let mut unit_connections = u64::MAX;
    for load in loads {
        let scenario = load.guide_scenario();
        let row: &Row = guide.table(scenario).row(unit)?;
        let ceiling = guide.table(scenario.inbound_ceiling()).row(unit)?;
        let traffic = load.traffic();
        inbound += share(traffic.inbound_bytes_per_s, ceiling.inbound_bytes_per_s());
        outbound += share(traffic.outbound_bytes_per_s, row.outbound_bytes_per_s());
        unit_connections = unit_connections.min(row.connections);
    }
    if unit_connections == u64::MAX {
        unit_connections = unit as u64 * guide::CONNECTIONS_PER_UNIT;
    }
    Some((
        inbound,
        outbound,
        connections as f64 / unit_connections as f64,
    ))
}

fn share(need: f64, capacity: f64) -> f64 {
    if need <= 0.0 {
        0.0
    } else if capacity <= 0.0 {
        f64::INFINITY
    } else {
        need / capacity
    }
}

/// The smallest unit of `guide` that carries all `loads` at once with `connections` open.
pub fn smallest_unit(guide: &Guide, loads: &[Load], connections: u64) -> Option<u32> {
    const EPSILON: f64 = 1e-9;
    guide.units.iter().copied().find(|&unit| {
        utilisation(guide, unit, loads, connections)
            .is_some_and(|(i, o, c)| i <= 1.0 + EPSILON && o <= 1.0 + EPSILON && c <= 1.0 + EPSILON)
    })
}

// ---------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------

/// How a report's scenario is compared with the guide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportClass {
    /// A message scenario with a table.
    Messages(Scenario, GuideScenario),
    /// `idle`, `connect-rate`, `join-leave-group`: the guide has no figure for them but the
    /// connection count per unit, so only the connections open in the step are compared.
    ConnectionsOnly,
}

/// Members per group of a report: its group size, else connections ÷ groups.
pub fn report_group_size(report: &Report) -> Option<u64> {
    report.group_size.or_else(|| {
        report
            .groups
            .filter(|&g| g > 0)
            .map(|g| report.connections / g)
    })
}

/// The class of `report`'s scenario; `None` for an unknown scenario or a `send-to-group` report
/// with neither a group size nor a number of groups.
pub fn classify(report: &Report) -> Option<ReportClass> {
    match report.scenario.as_str() {
        "idle" | "connect-rate" | "join-leave-group" => Some(ReportClass::ConnectionsOnly),
        name => {
            let scenario = Scenario::from_name(name)?;
            let table = guide_scenario(scenario, report_group_size(report))?;
            Some(ReportClass::Messages(scenario, table))
        }
    }
}

/// The report's last passing step.
pub fn last_passing_step(report: &Report) -> Option<&Step> {
    let index = report.last_passing_step?;
    report
        .steps
        .iter()
        .find(|step| step.index == index)
        .or_else(|| report.steps.get(index.checked_sub(1)?))
}

/// The largest unit of the current guide whose published figure for the report's scenario the
/// report's last passing step equals or exceeds; see [`azure_unit_in`].
pub fn azure_unit(report: &Report) -> Option<String> {
    azure_unit_in(&guide::CURRENT, report)
}

/// The largest unit of `guide` whose published figure for the report's scenario the report's
/// last passing step equals or exceeds, as `Unit50` (`Unit200 (Premium_P2)` above Unit100).
///
/// - The step's `connections` must reach the column's connections.
/// - Its `outbound_per_s`, and for tables whose inbound rate is a reached ceiling (echo, small
///   group, send to connection, REST send to user) its `inbound_per_s`, must reach the column's;
///   the broadcast, big-group and REST-broadcast runs send a fixed 2 or 20 messages/s, which
///   is no achievement to match. Rates are scaled by counted size / 2,048 (a 4 KB run counts
///   double, a run of 1 KB or smaller messages half) and may be up to
///   [`MEASUREMENT_TOLERANCE`] short.
/// - `send-to-group` uses the small-group table below 20 members, the big-group table from 20;
///   without a group size there is no unit.
/// - `idle`, `connect-rate` and `join-leave-group` compare connections only (1,000 per unit).
/// - Unknown scenarios, and reports without a passing step, have no unit.
pub fn azure_unit_in(guide: &Guide, report: &Report) -> Option<String> {
    let step = last_passing_step(report)?;
    let unit = match classify(report)? {
        ReportClass::ConnectionsOnly => guide
            .units
            .iter()
            .copied()
            .filter(|&unit| unit as u64 * guide::CONNECTIONS_PER_UNIT <= step.connections)
            .max(),
        ReportClass::Messages(_, scenario) => {
            let scale =
                counted_size(report.message_size as u64) as f64 / guide::MESSAGE_SIZE as f64;
            let reaches = |measured: f64, published: u64| {
                measured * scale >= published as f64 * (1.0 - MEASUREMENT_TOLERANCE)
            };
            guide
                .table(scenario)
                .rows
                .iter()
                .filter(|row| {
                    step.connections >= row.connections
                        && reaches(step.outbound_per_s, row.outbound_per_s)
                        && (!scenario.inbound_is_limit()
                            || reaches(step.inbound_per_s, row.inbound_per_s))
                })
                .map(|row| row.unit)
                .max()
        }
    }?;
    Some(guide.unit_label(unit))
}

/// What a report's last passing step measured, as compared with a load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measured {
    pub scenario: String,
    pub target: String,
    pub mode: String,
    pub transport: String,
    pub protocol: String,
    pub message_size: u64,
    pub group_size: Option<u64>,
    /// The last passing step (1-based), if any.
    pub step: Option<usize>,
    pub connections: u64,
    pub inbound_per_s: f64,
    pub outbound_per_s: f64,
    pub p99_ms: Option<f64>,
}

impl Measured {
    pub fn of(report: &Report) -> Measured {
        let step = last_passing_step(report);
        Measured {
            scenario: report.scenario.clone(),
            target: report.target.clone(),
            mode: report.mode.clone(),
            transport: report.transport.clone(),
            protocol: report.protocol.clone(),
            message_size: report.message_size as u64,
            group_size: report_group_size(report),
            step: step.map(|s| s.index),
            connections: step.map_or(0, |s| s.connections),
            inbound_per_s: step.map_or(0.0, |s| s.inbound_per_s),
            outbound_per_s: step.map_or(0.0, |s| s.outbound_per_s),
            p99_ms: step.map(|s| s.latency.p99_ms),
        }
    }
}

/// A load against a measurement of its scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Required / measured, for inbound and outbound bandwidth (counted sizes) and connections.
    pub inbound_share: f64,
    pub outbound_share: f64,
    pub connections_share: f64,
    /// The largest of the three shares: the fraction of the measured capacity the load uses.
    pub share: f64,
    /// 1 / share: how many times the load fits (infinite for an empty load).
    pub headroom: f64,
    pub enough: bool,
}

/// Whether `report` measured `load`'s scenario (for send-to-group, the same table: both small or
/// both big groups).
pub fn matches(load: &Load, report: &Report) -> bool {
    matches!(classify(report), Some(ReportClass::Messages(scenario, table))
        if scenario == load.scenario && table == load.guide_scenario())
}

/// Compares `load` with `measured`. Bandwidths use counted sizes on both sides, so the same
/// message size makes this a plain message-rate comparison.
pub fn compare(load: &Load, measured: &Measured) -> Comparison {
    let need = load.traffic();
    let got = Traffic::of(
        measured.inbound_per_s,
        measured.outbound_per_s,
        measured.message_size,
    );
    let inbound_share = share(need.inbound_bytes_per_s, got.inbound_bytes_per_s);
    let outbound_share = share(need.outbound_bytes_per_s, got.outbound_bytes_per_s);
    let connections_share = share(load.connections as f64, measured.connections as f64);
    let total = inbound_share.max(outbound_share).max(connections_share);
    Comparison {
        inbound_share,
        outbound_share,
        connections_share,
        share: total,
        headroom: headroom(total),
        enough: total <= 1.0,
    }
}

/// 1 / share (infinite for 0).
pub fn headroom(share: f64) -> f64 {
    if share <= 0.0 {
        f64::INFINITY
    } else {
        1.0 / share
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guide::{CURRENT, SEVEN_UNIT};
    use crate::report::{Latency, Step};

    fn load(scenario: Scenario, connections: u64) -> Load {
        Load::new(scenario, connections)
    }

    /// The smallest unit for one load with its own connections.
    fn alone(guide: &Guide, load: &Load) -> Option<u32> {
        smallest_unit(guide, std::slice::from_ref(load), load.connections)
    }

    #[test]
    fn echo_at_the_guide_defaults() {
        let l = load(Scenario::Echo, 10_000);
        l.validate().unwrap();
        let t = l.traffic();
        assert_eq!(t.inbound_per_s, 10_000.0);
        assert_eq!(t.outbound_per_s, 10_000.0);
        // 10,000 × 2,048 B = 20,480,000 B/s = the guide's "20 MBps".
        assert_eq!(t.inbound_bytes_per_s, 20_480_000.0);
        assert_eq!(t.outbound_bytes_per_s, 20.0 * guide::MB as f64);
        assert_eq!(t.billed_outbound_per_s, 10_000.0);
        assert_eq!(alone(&CURRENT, &l), Some(10));
        assert_eq!(alone(&SEVEN_UNIT, &l), Some(10));
    }

    #[test]
    fn one_more_connection_or_message_needs_the_next_unit() {
        let l = load(Scenario::Echo, 10_001);
        assert_eq!(alone(&SEVEN_UNIT, &l), Some(20));
        // The current guide has no echo Unit20 column.
        assert_eq!(alone(&CURRENT, &l), Some(50));
        let mut l = load(Scenario::Echo, 1_000);
        l.send_interval_ms = 999.0;
        assert_eq!(alone(&SEVEN_UNIT, &l), Some(2));
    }

    #[test]
    fn small_messages_count_as_1kb_and_large_ones_scale() {
        // 2,000 senders every 1 s of 100-byte messages: bandwidth 2,000 × 1,024.
        let mut l = load(Scenario::Echo, 2_000);
        l.message_size = 100;
        let t = l.traffic();
        assert_eq!(t.inbound_bytes_per_s, 2_048_000.0);
        assert_eq!(t.billed_outbound_per_s, 2_000.0);
        // Half of Unit2's 4 MBps, and exactly Unit1's 2 MBps, but 2,000 connections need Unit2.
        assert_eq!(alone(&SEVEN_UNIT, &l), Some(2));
        // 1,000 connections sending 1 KB messages twice a second: 2,000 msg/s in Unit1 (2 MBps).
        let mut l = load(Scenario::Echo, 1_000);
        l.message_size = 1_024;
        l.send_interval_ms = 500.0;
        assert_eq!(l.traffic().inbound_per_s, 2_000.0);
        assert_eq!(alone(&SEVEN_UNIT, &l), Some(1));
        l.message_size = 1_025;
        assert_eq!(alone(&SEVEN_UNIT, &l), Some(2));
        // The guide's own example: Unit100 broadcast, 20 KB every 5 s to 100,000 connections.
        let mut l = load(Scenario::Broadcast, 100_000);
        l.senders = 1;
        l.message_size = 20 * guide::KB;
        l.send_interval_ms = 5_000.0;
        let t = l.traffic();
        assert_eq!(t.outbound_per_s, 20_000.0);
        assert_eq!(t.outbound_bytes_per_s, 400.0 * guide::MB as f64);
        assert_eq!(t.billed_outbound_per_s, 200_000.0);
        assert_eq!(alone(&SEVEN_UNIT, &l), Some(100));
        assert_eq!(alone(&CURRENT, &l), Some(100));
    }

    #[test]
    fn fan_out_per_scenario() {
        let mut b = load(Scenario::Broadcast, 5_000);
        b.senders = 2;
        b.send_interval_ms = 500.0;
        assert_eq!(b.traffic().inbound_per_s, 4.0);
        assert_eq!(b.traffic().outbound_per_s, 20_000.0);
        // 20,000 outbound/s of 2 KB: Unit10 in both guides (Unit5 is 10,000).
        assert_eq!(alone(&SEVEN_UNIT, &b), Some(10));

        let mut g = load(Scenario::SendToGroup, 1_000);
        g.group_size = Some(10);
        g.senders = 200;
        assert_eq!(g.guide_scenario(), GuideScenario::SmallGroup);
        assert_eq!(g.traffic().outbound_per_s, 2_000.0);
        assert_eq!(alone(&CURRENT, &g), Some(1));
        g.senders = 201;
        assert_eq!(alone(&CURRENT, &g), Some(2));

        let mut big = load(Scenario::SendToGroup, 1_000);
        big.group_size = Some(100);
        big.senders = 20;
        assert_eq!(big.guide_scenario(), GuideScenario::BigGroup);
        assert_eq!(big.traffic().outbound_per_s, 2_000.0);
        assert_eq!(alone(&CURRENT, &big), Some(1));

        let c = load(Scenario::SendToConnection, 5_000);
        assert_eq!(c.traffic().outbound_per_s, 5_000.0);
        assert_eq!(alone(&SEVEN_UNIT, &c), Some(5));
        // Current guide: no Unit10 column for send to connection; Unit20 carries 20,000/s.
        assert_eq!(alone(&CURRENT, &c), Some(20));

        let u = load(Scenario::RestSendToUser, 1_000);
        assert_eq!(u.traffic().outbound_per_s, 1_000.0);
        // 1,000/s of REST send to user: Unit10 now (2,000/s), Unit10 before (1,300/s).
        assert_eq!(alone(&CURRENT, &u), Some(10));
        assert_eq!(alone(&SEVEN_UNIT, &u), Some(10));
    }

    #[test]
    fn the_group_line_is_drawn_at_20_members() {
        assert_eq!(
            guide_scenario(Scenario::SendToGroup, Some(19)),
            Some(GuideScenario::SmallGroup)
        );
        assert_eq!(
            guide_scenario(Scenario::SendToGroup, Some(20)),
            Some(GuideScenario::BigGroup)
        );
        assert_eq!(guide_scenario(Scenario::SendToGroup, None), None);
    }

    #[test]
    fn broadcast_inbound_is_capped_by_echo_not_by_the_trickle() {
        // 10 broadcasts/s to 100 connections: 1,000 out/s; the table's inbound 2/s is no limit.
        let mut b = load(Scenario::Broadcast, 100);
        b.senders = 10;
        assert_eq!(alone(&CURRENT, &b), Some(1));
    }

    #[test]
    fn mixes_add_shares_of_each_scenarios_capacity() {
        // Echo 500/s (half of Unit1's inbound and outbound) + broadcast 1/s to 500 connections
        // (500 of Unit1's 2,000 out/s, a quarter): outbound share 0.75, connections 1,000.
        let echo = load(Scenario::Echo, 500);
        let mut b = load(Scenario::Broadcast, 500);
        b.senders = 1;
        let p = plan(&SEVEN_UNIT, &[echo.clone(), b.clone()], None);
        assert_eq!(p.total.connections, 1_000);
        assert_eq!(p.total.traffic.inbound_per_s, 501.0);
        assert_eq!(p.total.traffic.outbound_per_s, 1_000.0);
        assert_eq!(p.total.traffic.outbound_bytes_per_s, 1_000.0 * 2_048.0);
        let (i, o, c) = utilisation(&SEVEN_UNIT, 1, &[echo.clone(), b.clone()], 1_000).unwrap();
        assert!((i - (0.5 + 1.0 / 1_000.0)).abs() < 1e-12, "{i}");
        assert!((o - 0.75).abs() < 1e-12, "{o}");
        assert_eq!(c, 1.0);
        assert_eq!(p.total.azure_unit, Some(1));
        assert_eq!(p.loads[0].azure_unit, Some(1));
        assert_eq!(p.loads[1].azure_unit, Some(1));
        // A third load with one more connection tips it to Unit2.
        let extra = load(Scenario::SendToConnection, 1);
        let p = plan(&SEVEN_UNIT, &[echo.clone(), b.clone(), extra], None);
        assert_eq!(p.total.azure_unit, Some(2));
        // Loads sharing their connections: the total can be given.
        let p = plan(&SEVEN_UNIT, &[echo, b], Some(500));
        assert_eq!(p.total.connections, 500);
        assert_eq!(p.total.azure_unit, Some(1));
    }

    #[test]
    fn mixes_only_use_units_every_table_publishes() {
        let echo = load(Scenario::Echo, 1_500);
        let conn = load(Scenario::SendToConnection, 1_500);
        // Together 3,000 connections: Unit10 carries echo but send to connection has no Unit10
        // column in the current guide, and Unit20 has no echo column: Unit50.
        let p = plan(&CURRENT, &[echo, conn], None);
        assert_eq!(p.total.azure_unit, Some(50));
    }

    #[test]
    fn beyond_the_largest_unit_there_is_none() {
        let l = load(Scenario::Echo, 150_000);
        assert_eq!(alone(&SEVEN_UNIT, &l), None);
        assert_eq!(alone(&CURRENT, &l), Some(200));
        let l = load(Scenario::SendToConnection, 100_000);
        // 100,000/s: Unit500 in the current guide; beyond Unit100's 20,000/s in the earlier.
        assert_eq!(alone(&CURRENT, &l), Some(500));
        assert_eq!(alone(&SEVEN_UNIT, &l), None);
    }

    #[test]
    fn validation() {
        let mut l = load(Scenario::Echo, 10);
        l.senders = 11;
        assert!(l.validate().unwrap_err().contains("senders"));
        let mut l = load(Scenario::RestSendToUser, 10);
        l.senders = 11;
        l.validate().unwrap();
        let l = load(Scenario::SendToGroup, 10);
        assert!(l.validate().unwrap_err().contains("group size"));
        let mut l = load(Scenario::Echo, 10);
        l.group_size = Some(2);
        assert!(l.validate().is_err());
        let mut l = load(Scenario::Echo, 10);
        l.send_interval_ms = 0.0;
        assert!(l.validate().is_err());
        assert!(load(Scenario::Echo, 0).validate().is_err());
    }

    #[test]
    fn billing_pieces() {
        assert_eq!(billed_messages(0), 1);
        assert_eq!(billed_messages(2_048), 1);
        assert_eq!(billed_messages(2_049), 2);
        assert_eq!(billed_messages(4_096), 2);
        assert_eq!(counted_size(10), 1_024);
        assert_eq!(counted_size(4_000), 4_000);
    }

    fn step(index: usize, connections: u64, inbound: f64, outbound: f64, passed: bool) -> Step {
        Step {
            index,
            connections,
            senders: connections,
            seconds: 60.0,
            inbound_per_s: inbound,
            outbound_per_s: outbound,
            passed,
            latency: Latency {
                p99_ms: 12.5,
                ..Latency::default()
            },
            ..Step::default()
        }
    }

    fn report(scenario: &str, steps: Vec<Step>) -> Report {
        let last = steps.iter().filter(|s| s.passed).map(|s| s.index).max();
        Report {
            scenario: scenario.into(),
            message_size: 2_048,
            send_interval_ms: 1_000.0,
            steps,
            last_passing_step: last,
            ..Report::default()
        }
    }

    #[test]
    fn azure_unit_of_echo_reports() {
        let r = report(
            "echo",
            vec![
                step(1, 10_000, 10_000.0, 10_000.0, true),
                step(2, 50_000, 50_000.0, 50_000.0, true),
                step(3, 100_000, 100_000.0, 99_000.0, false),
            ],
        );
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit50"));
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit50"));
        // A hair under the figure (within 1 %) still reaches it.
        let r = report("echo", vec![step(1, 20_000, 19_850.0, 19_850.0, true)]);
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit20"));
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit10"));
        // More rate but fewer connections than Unit2 holds: Unit1.
        let r = report("echo", vec![step(1, 1_999, 5_000.0, 5_000.0, true)]);
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit1"));
        // Nothing passed, or too little: none.
        let r = report("echo", vec![step(1, 1_000, 1_000.0, 1_000.0, false)]);
        assert_eq!(azure_unit(&r), None);
        let r = report("echo", vec![step(1, 999, 999.0, 999.0, true)]);
        assert_eq!(azure_unit(&r), None);
        // Premium sizes in the current guide.
        let r = report("echo", vec![step(1, 200_000, 200_000.0, 200_000.0, true)]);
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit200 (Premium_P2)"));
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit100"));
    }

    #[test]
    fn azure_unit_scales_by_counted_message_size() {
        let mut r = report("echo", vec![step(1, 10_000, 10_000.0, 10_000.0, true)]);
        r.message_size = 256; // counts as 1 KB: half the 2 KB figure
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit5"));
        r.message_size = 4_096; // double, but connections cap it
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit10"));
    }

    #[test]
    fn azure_unit_of_fan_out_reports_ignores_the_inbound_trickle() {
        // One broadcast per second to 50,000 connections: 50,000 out/s, inbound 1/s < 2/s.
        let r = report("broadcast", vec![step(1, 50_000, 1.0, 50_000.0, true)]);
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit10"));
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit20"));
        let r = report(
            "rest-broadcast",
            vec![step(1, 100_000, 2.0, 200_000.0, true)],
        );
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit100"));
    }

    #[test]
    fn azure_unit_of_group_reports() {
        let mut r = report(
            "send-to-group",
            vec![step(1, 100_000, 10_000.0, 100_000.0, true)],
        );
        r.group_size = Some(10);
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit100"));
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit100"));
        r.group_size = Some(1_000);
        // Big groups: 100,000 out/s is Unit50's figure.
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit50"));
        r.group_size = None;
        assert_eq!(azure_unit(&r), None);
        // 10 groups of 100,000 connections: big groups.
        r.groups = Some(10);
        r.connections = 100_000;
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit50"));
    }

    #[test]
    fn azure_unit_of_connection_only_and_unknown_reports() {
        for scenario in ["idle", "connect-rate", "join-leave-group"] {
            let r = report(scenario, vec![step(1, 25_000, 0.0, 0.0, true)]);
            assert_eq!(azure_unit(&r).as_deref(), Some("Unit20"), "{scenario}");
            assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit20"));
        }
        let r = report("mystery", vec![step(1, 25_000, 25_000.0, 25_000.0, true)]);
        assert_eq!(azure_unit(&r), None);
        let r = report(
            "send-to-connection",
            vec![step(1, 100_000, 25_000.0, 25_000.0, true)],
        );
        assert_eq!(azure_unit(&r).as_deref(), Some("Unit100"));
        assert_eq!(azure_unit_in(&SEVEN_UNIT, &r).as_deref(), Some("Unit100"));
    }

    #[test]
    fn last_passing_step_by_index_then_position() {
        let mut r = report(
            "echo",
            vec![step(1, 1, 1.0, 1.0, true), step(2, 2, 2.0, 2.0, true)],
        );
        assert_eq!(last_passing_step(&r).unwrap().index, 2);
        r.steps[1].index = 7; // an index that is not there: fall back to the position
        assert_eq!(last_passing_step(&r).unwrap().connections, 2);
        r.last_passing_step = None;
        assert!(last_passing_step(&r).is_none());
    }

    #[test]
    fn compare_with_a_measurement() {
        let r = report("echo", vec![step(1, 20_000, 20_000.0, 20_000.0, true)]);
        let measured = Measured::of(&r);
        assert_eq!(measured.step, Some(1));
        assert_eq!(measured.p99_ms, Some(12.5));
        let l = load(Scenario::Echo, 10_000);
        assert!(matches(&l, &r));
        let c = compare(&l, &measured);
        assert_eq!(c.share, 0.5);
        assert_eq!(c.headroom, 2.0);
        assert!(c.enough);
        // Twice the size: bandwidth share doubles.
        let mut l = load(Scenario::Echo, 10_000);
        l.message_size = 4_096;
        let c = compare(&l, &measured);
        assert_eq!(c.inbound_share, 1.0);
        assert!(c.enough);
        l.senders = 10_001;
        l.connections = 10_001;
        assert!(!compare(&l, &measured).enough);
        // Connections count too.
        let l = load(Scenario::Echo, 40_000);
        let c = compare(&l, &measured);
        assert_eq!(c.connections_share, 2.0);
        assert!(!c.enough);
        // Other scenarios and other group classes do not match.
        assert!(!matches(&load(Scenario::Broadcast, 10), &r));
        let mut g = report("send-to-group", vec![step(1, 10, 1.0, 1.0, true)]);
        g.group_size = Some(10);
        let mut small = load(Scenario::SendToGroup, 100);
        small.group_size = Some(5);
        assert!(matches(&small, &g));
        small.group_size = Some(50);
        assert!(!matches(&small, &g));
    }

    #[test]
    fn a_report_without_a_passing_step_measured_nothing() {
        let r = report("echo", vec![step(1, 1_000, 1_000.0, 1_000.0, false)]);
        let measured = Measured::of(&r);
        assert_eq!(measured.step, None);
        let c = compare(&load(Scenario::Echo, 1), &measured);
        assert!(!c.enough);
        assert_eq!(c.headroom, 0.0);
    }
}
