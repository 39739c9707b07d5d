//! Executes one hub operation on the node: validates names and query parameters, calls the
//! executor, and picks the success code of the route's API version.

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::time::Duration;
use switchyard_core::{ConnectionId, GroupName, HubName, Target, UserId};

use super::body::{self, SendBody};
use super::error::{codes, RestError};
use super::routes::{Api, Op, Recipient};
use crate::http::Query;
use crate::node::Node;

/// Group listing page size when `maxpagesize` is absent, and its allowed maximum.
const DEFAULT_PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 200;

pub(crate) async fn execute(
    node: &Node,
    api: Api,
    hub: &HubName,
    op: Op,
    parts: &Parts,
    query: &Query,
    body: Body,
) -> Result<Response, RestError> {
    let v1 = matches!(api, Api::V1 | Api::V1Preview);
    match op {
        Op::Send(recipient) => {
            let target = send_target(&recipient, query)?;
            match body::read(
                &parts.headers,
                body,
                node.config.limits.max_request_body_size,
            )
            .await?
            {
                SendBody::Invocation {
                    target: method,
                    arguments,
                } => {
                    let payloads = node.encode_invocation(hub, &method, &arguments);
                    node.send(hub, target, payloads);
                }
                SendBody::Payloads(payloads) => node.send_payloads(hub, target, payloads),
            }
            Ok(status(StatusCode::ACCEPTED))
        }
        Op::Close(recipient) => {
            let reason = query
                .get("reason")
                .filter(|r| !r.is_empty())
                .map(str::to_string);
            let excluded = excluded(query)?;
            let (target, single) = close_target(&recipient, excluded.clone())?;
            node.close(hub, target, excluded, reason);
            Ok(status(match (single, v1) {
                (true, false) => StatusCode::OK,
                (true, true) => StatusCode::ACCEPTED,
                (false, _) => StatusCode::NO_CONTENT,
            }))
        }
        Op::ConnectionExists(connection) => {
            let connection = ConnectionId::new(&connection)?;
            found(
                node.connection_exists(hub, &connection),
                codes::CONNECTION_NOT_EXISTED,
                || format!("connection '{connection}' does not exist"),
            )
        }
        Op::UserExists(user) => {
            let user = UserId::new(&user)?;
            found(
                node.user_exists(hub, &user),
                codes::USER_NOT_EXISTED,
                || format!("user '{user}' has no connection"),
            )
        }
        Op::GroupExists(group) => {
            let group = GroupName::new(&group)?;
            found(
                node.group_exists(hub, &group),
                codes::GROUP_NOT_EXISTED,
                || format!("group '{group}' has no connection"),
            )
        }
        Op::UserInGroup { user, group } => {
            let (user, group) = (UserId::new(&user)?, GroupName::new(&group)?);
            found(
                node.user_in_group(hub, &user, &group),
                codes::USER_NOT_IN_GROUP,
                || format!("user '{user}' is not in group '{group}'"),
            )
        }
        Op::AddConnectionToGroup { group, connection } => {
            let (group, connection) = (GroupName::new(&group)?, ConnectionId::new(&connection)?);
            found(
                node.add_to_group(hub, &connection, &group),
                codes::CONNECTION_NOT_EXISTED_ERROR,
                || format!("connection '{connection}' does not exist"),
            )
        }
        Op::RemoveConnectionFromGroup { group, connection } => {
            let (group, connection) = (GroupName::new(&group)?, ConnectionId::new(&connection)?);
            found(
                node.remove_from_group(hub, &connection, Some(&group)),
                codes::CONNECTION_NOT_EXISTED_ERROR,
                || format!("connection '{connection}' does not exist"),
            )
        }
        Op::RemoveConnectionFromAllGroups(connection) => {
            let connection = ConnectionId::new(&connection)?;
            // Removing a connection that is gone from all groups is already done: 200.
            node.remove_from_group(hub, &connection, None);
            Ok(status(StatusCode::OK))
        }
        Op::AddUserToGroup { user, group } => {
            let (user, group) = (UserId::new(&user)?, GroupName::new(&group)?);
            let ttl = ttl(query)?;
            node.user_join_group(hub, &user, &group, ttl);
            Ok(status(if v1 {
                StatusCode::ACCEPTED
            } else {
                StatusCode::OK
            }))
        }
        Op::RemoveUserFromGroup { user, group } => {
            let (user, group) = (UserId::new(&user)?, GroupName::new(&group)?);
            node.user_leave_group(hub, &user, Some(&group));
            Ok(status(if v1 {
                StatusCode::ACCEPTED
            } else {
                StatusCode::NO_CONTENT
            }))
        }
        Op::RemoveUserFromAllGroups(user) => {
            let user = UserId::new(&user)?;
            node.user_leave_group(hub, &user, None);
            Ok(status(if v1 {
                StatusCode::OK
            } else {
                StatusCode::NO_CONTENT
            }))
        }
        Op::ListGroupConnections(group) => {
            let group = GroupName::new(&group)?;
            list_group_connections(node, hub, &group, parts, query)
        }
    }
}

fn status(code: StatusCode) -> Response {
    code.into_response()
}

/// 200 when the thing exists, else 404 carrying the `x-ms-error-code` the SDK expects.
fn found(
    exists: bool,
    code: &'static str,
    message: impl FnOnce() -> String,
) -> Result<Response, RestError> {
    if exists {
        Ok(status(StatusCode::OK))
    } else {
        Err(RestError::not_found(code, message()))
    }
}

/// `excluded` connection ids (repeatable). Empty values are skipped; others must be valid ids.
fn excluded(query: &Query) -> Result<Vec<ConnectionId>, RestError> {
    query
        .all("excluded")
        .filter(|id| !id.is_empty())
        .map(|id| ConnectionId::new(id).map_err(RestError::from))
        .collect()
}

fn list<T>(
    text: &str,
    parse: impl Fn(&str) -> Result<T, switchyard_core::NameError>,
) -> Result<Vec<T>, RestError> {
    text.split(',')
        .map(|item| parse(item.trim()).map_err(RestError::from))
        .collect()
}

fn send_target(recipient: &Recipient, query: &Query) -> Result<Target, RestError> {
    Ok(match recipient {
        Recipient::All => Target::All {
            excluded: excluded(query)?,
        },
        Recipient::User(user) => Target::User(UserId::new(user)?),
        Recipient::UserList(users) => Target::Users(list(users, UserId::new)?),
        Recipient::Connection(connection) => Target::Connection(ConnectionId::new(connection)?),
        Recipient::Group(group) => Target::Group {
            group: GroupName::new(group)?,
            excluded: excluded(query)?,
            excluded_users: Vec::new(),
        },
        Recipient::GroupList(groups) => Target::Groups(list(groups, GroupName::new)?),
    })
}

/// The close target, and whether it is a single connection (whose success code differs).
fn close_target(
    recipient: &Recipient,
    excluded: Vec<ConnectionId>,
) -> Result<(Target, bool), RestError> {
    Ok(match recipient {
        Recipient::Connection(connection) => {
            (Target::Connection(ConnectionId::new(connection)?), true)
        }
        Recipient::User(user) => (Target::User(UserId::new(user)?), false),
        Recipient::Group(group) => (
            Target::Group {
                group: GroupName::new(group)?,
                excluded,
                excluded_users: Vec::new(),
            },
            false,
        ),
        Recipient::All => (Target::All { excluded }, false),
        Recipient::UserList(_) | Recipient::GroupList(_) => {
            return Err(RestError::BadRequest(
                "closing connections of several users or groups at once is not supported".into(),
            ))
        }
    })
}

/// `ttl` in whole seconds: absent = no expiry, `0` = current connections only.
fn ttl(query: &Query) -> Result<Option<Duration>, RestError> {
    let Some(text) = query.get("ttl").filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    match text.trim().parse::<i32>() {
        Ok(seconds) if seconds >= 0 => Ok(Some(Duration::from_secs(seconds as u64))),
        _ => Err(RestError::BadRequest(format!(
            "'ttl' must be a whole number of seconds from 0 to {} (got '{text}')",
            i32::MAX
        ))),
    }
}

/// A positive integer query parameter, if present.
fn positive(query: &Query, key: &str, max: usize) -> Result<Option<usize>, RestError> {
    let Some(text) = query.get(key).filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(Some(n)),
        _ => Err(RestError::BadRequest(format!(
            "'{key}' must be an integer from 1 to {max} (got '{text}')"
        ))),
    }
}

/// `GET …/groups/{group}/connections?maxpagesize=&top=&continuationToken=` (2024-12-01):
/// members ordered by connection id. The continuation token is the last id of the previous
/// page; `nextLink` repeats the request's query with the token (and the remaining `top`).
fn list_group_connections(
    node: &Node,
    hub: &HubName,
    group: &GroupName,
    parts: &Parts,
    query: &Query,
) -> Result<Response, RestError> {
    let page_size = positive(query, "maxpagesize", MAX_PAGE_SIZE)?.unwrap_or(DEFAULT_PAGE_SIZE);
    let top = positive(query, "top", i32::MAX as usize)?;
    let page = top.map_or(page_size, |top| top.min(page_size));
    let after = query.get("continuationToken").filter(|t| !t.is_empty());
    let mut members = node.group_members(hub, group, after, page + 1);
    let more = members.len() > page;
    members.truncate(page);
    let remaining = top.map(|top| top - members.len());
    let next_link = match members.last() {
        Some(last) if more && remaining != Some(0) => Some(next_link(
            parts.uri.path(),
            query,
            last.connection.as_str(),
            remaining,
        )),
        _ => None,
    };
    let value: Vec<_> = members
        .iter()
        .map(|m| json!({"connectionId": m.connection.as_str(), "userId": m.user.as_ref().map(UserId::as_str)}))
        .collect();
    let body = json!({"value": value, "nextLink": next_link});
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response())
}

fn next_link(path: &str, query: &Query, token: &str, remaining: Option<usize>) -> String {
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (key, value) in &query.0 {
        if !key.eq_ignore_ascii_case("continuationToken") && !key.eq_ignore_ascii_case("top") {
            out.append_pair(key, value);
        }
    }
    if let Some(remaining) = remaining {
        out.append_pair("top", &remaining.to_string());
    }
    out.append_pair("continuationToken", token);
    format!("{path}?{}", out.finish())
}
