//! One REST caller's task: calls on its timetable without waiting for earlier calls.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Semaphore;
use tokio::time::sleep_until;

use super::connect::{group_member_path, group_name, rest_token};
use super::instant_at;
use super::shared::Shared;
use crate::scenario::{Plan, Scenario};
use crate::wire;

/// One REST caller on its timetable, without waiting for earlier calls (open loop; at most
/// 2,048 in flight per worker). Sends `POST` a `Measure` (counted where it arrives);
/// rest-join-leave-group alternates `PUT` and `DELETE` of connection c's membership and
/// counts each success at its response.
pub(super) async fn rest_caller(
    shared: Arc<Shared>,
    c: u64,
    connection_id: Option<String>,
    http: reqwest::Client,
    permits: Arc<Semaphore>,
) {
    let plan = &shared.plan;
    let Some(rest) = plan.rest.clone() else {
        return;
    };
    let Some(base) = plan.rest_base_of(&rest, c) else {
        return;
    };
    let connection_id = connection_id.unwrap_or_default();
    // The 2022-06-01 data-plane API (Azure's current REST surface).
    let path = match plan.scenario {
        Scenario::RestSendToUser => format!(
            "api/hubs/{}/users/{}/:send?api-version=2022-06-01",
            plan.hub,
            Plan::user_of(c % plan.connections.max(1))
        ),
        Scenario::RestSendToGroup => format!(
            "api/hubs/{}/groups/{}/:send?api-version=2022-06-01",
            plan.hub,
            group_name(plan.rest_group_of(c).unwrap_or_default())
        ),
        // A poster sends to its own room.
        Scenario::RestChatRoom => format!(
            "api/hubs/{}/groups/{}/:send?api-version=2022-06-01",
            plan.hub,
            group_name(plan.group_of(c).unwrap_or_default())
        ),
        Scenario::RestSendToConnection => format!(
            "api/hubs/{}/connections/{}/:send?api-version=2022-06-01",
            plan.hub,
            percent_encoding::utf8_percent_encode(
                &connection_id,
                percent_encoding::NON_ALPHANUMERIC
            )
        ),
        Scenario::RestJoinLeaveGroup => group_member_path(
            &plan.hub,
            &group_name(plan.group_of(c).unwrap_or_default()),
            &connection_id,
        ),
        _ => format!("api/hubs/{}/:send?api-version=2022-06-01", plan.hub),
    };
    let url = format!("{base}{path}");
    let token = rest_token(&rest, &url);
    let membership = plan.scenario == Scenario::RestJoinLeaveGroup;
    let fanout = shared.fanout(c);
    let interval_ms = plan.interval_of(c).unwrap_or(plan.interval_ms);
    let mut due_ms = shared.schedule.first_due(plan, c);
    let mut seq = 0u64;
    let mut finish = shared.finish.clone();
    while let Some(due) = due_ms {
        if shared.stopped(due) {
            break;
        }
        tokio::select! {
            biased;
            _ = finish.changed() => break,
            _ = sleep_until(instant_at(due)) => {}
        }
        let step = shared.schedule.step_of(due);
        let mut request = if membership {
            // Join on even calls, leave on odd ones: the membership ends as it began.
            let method = if seq.is_multiple_of(2) {
                reqwest::Method::PUT
            } else {
                reqwest::Method::DELETE
            };
            shared.sent(due, fanout, 0);
            http.request(method, &url)
        } else {
            let body = serde_json::to_vec(&json!({
                "target": wire::MEASURE,
                "arguments": [due, shared.padding_payload(c as u32, seq, step)],
            }))
            .unwrap_or_default();
            shared.sent(due, fanout, body.len());
            http.post(&url)
                .header("content-type", "application/json")
                .body(body)
        };
        seq += 1;
        due_ms = Some(due + interval_ms);
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = finish.changed() => break,
        };
        request = request.timeout(REST_TIMEOUT);
        if let Some(token) = &token {
            request = request.bearer_auth(token);
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let result = request.send().await;
            drop(permit);
            match result {
                Ok(response) if response.status().is_success() => {
                    if membership {
                        shared.acknowledged(due, 0);
                    }
                }
                Ok(response) => shared
                    .stats
                    .lock()
                    .error(format!("REST: status {}", response.status())),
                Err(e) => shared
                    .stats
                    .lock()
                    .error(format!("REST: {}", switchyard_client::with_causes(&e))),
            }
        });
    }
    shared.unsent(due_ms, interval_ms, fanout);
}

/// A REST call that takes longer is abandoned (its deliveries count as lost if missing).
pub(super) const REST_TIMEOUT: Duration = Duration::from_secs(30);
