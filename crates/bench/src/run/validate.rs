//! The flags clap cannot check: ranges, combinations, and what a scenario needs.

use std::str::FromStr;

use super::{soak, RunError};
use crate::scenario::{RunArgs, Scenario, DEFAULT_ROOM_SIZE};
use crate::worker;

/// Checks flags that clap cannot.
pub(super) fn validate(scenario: Scenario, args: &RunArgs) -> Result<(), RunError> {
    let format = worker::parse_format(&args.protocol)?;
    let transport =
        switchyard_client::connection::Transport::from_str(&args.transport).map_err(|_| {
            RunError(format!(
                "unknown transport '{}' (websockets, serversentevents, longpolling)",
                args.transport
            ))
        })?;
    let nodes = args
        .nodes
        .unwrap_or(1)
        .max(args.client_endpoints.len() as u32);
    if args.nodes == Some(0) || nodes > 64 {
        return Err(RunError("--nodes must be 1–64".into()));
    }
    if args.connections == 0 {
        return Err(RunError("--connections must be at least 1".into()));
    }
    if args.steps == 0 {
        return Err(RunError("--steps must be at least 1".into()));
    }
    if args.workers == 0 || args.workers > 64 {
        return Err(RunError("--workers must be 1–64".into()));
    }
    if args.duration.is_zero() {
        return Err(RunError("--duration must be more than 0".into()));
    }
    if args.send_interval.is_zero() {
        return Err(RunError("--send-interval must be more than 0".into()));
    }
    if args.connect_rate.is_nan() || args.connect_rate <= 0.0 {
        return Err(RunError("--connect-rate must be more than 0".into()));
    }
    if transport == switchyard_client::connection::Transport::ServerSentEvents
        && format == switchyard_hub_protocol::Format::MessagePack
    {
        return Err(RunError(
            "MessagePack is binary and cannot travel over Server-Sent Events: use -p json or another transport".into(),
        ));
    }
    if scenario.is_chat_room() {
        // The profile fixes who posts and how often.
        if args.senders.is_some() || args.steps > 1 || args.groups.is_some() {
            return Err(RunError(format!(
                "{}: the profile fixes the posters (10 % of each room every 11 send \
                 intervals, 20 % every 59): no --senders, --steps or --groups (rooms are \
                 --group-size members, default {DEFAULT_ROOM_SIZE})",
                scenario.name()
            )));
        }
        if args.group_size == Some(0) {
            return Err(RunError("--group-size must be at least 1".into()));
        }
    }
    if soak::enabled(args) {
        if !scenario.is_chat_room() {
            return Err(RunError(
                "--kill-node-every and --restart-redis-at run with chat-room or rest-chat-room \
                 (the soak's traffic)"
                    .into(),
            ));
        }
        if args.service_bin.is_none() || args.nodes.unwrap_or(0) < 2 || args.redis_url.is_some() {
            return Err(RunError(
                "a soak kills and starts the nodes and Redis itself: --service-bin with \
                 --nodes 2 or more, without --redis-url"
                    .into(),
            ));
        }
        if args.rss_every.is_some_and(|d| d.is_zero())
            || args.kill_node_every.is_some_and(|d| d.is_zero())
        {
            return Err(RunError(
                "--rss-every and --kill-node-every must be more than 0".into(),
            ));
        }
    }
    if matches!(scenario, Scenario::SendToGroup | Scenario::RestSendToGroup)
        && args.group_size.is_none()
        && args.groups.is_none()
    {
        return Err(RunError(format!(
            "{} needs --group-size N (Azure's small groups: 10) or --groups N (big groups: 10)",
            scenario.name()
        )));
    }
    if scenario == Scenario::RestJoinLeaveGroup && args.is_peer() {
        return Err(RunError(
            "rest-join-leave-group needs the REST group API, which the peer does not have".into(),
        ));
    }
    if args.stateful_reconnect {
        if transport != switchyard_client::connection::Transport::WebSockets {
            return Err(RunError(
                "--stateful-reconnect needs WebSockets (the official clients use it there only)"
                    .into(),
            ));
        }
        if soak::enabled(args) {
            return Err(RunError(
                "--stateful-reconnect does not run with a soak (its clients start over)".into(),
            ));
        }
    }
    if !(0.0..=1.0).contains(&args.drop_share) {
        return Err(RunError("--drop-share must be between 0 and 1".into()));
    }
    if let Some(senders) = args.senders {
        if scenario.sends() && senders == 0 {
            return Err(RunError("--senders must be at least 1".into()));
        }
        let one_per_connection = !scenario.is_rest()
            || matches!(
                scenario,
                Scenario::RestSendToConnection | Scenario::RestJoinLeaveGroup
            );
        if one_per_connection && senders > args.connections {
            return Err(RunError(format!(
                "--senders {senders} is more than --connections {}",
                args.connections
            )));
        }
    }
    Ok(())
}
