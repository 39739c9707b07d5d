//! Executes one hub operation: validates names and query parameters into a [`Command`], has
//! the executor apply it, and picks the success code of the route's API version.

use axum::body::Body;
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::time::Duration;
use switchyard_core::{ConnectionId, GroupName, HubName, Target, UserId};

use super::body::{self, SendBody};
use super::error::RestError;
use super::routes::{Api, Op, Recipient};
use super::Rest;
use crate::command::{Check, Command};
use crate::executor::Executor;
use crate::http::Query;

/// Group listing page size when `maxpagesize` is absent, and its allowed maximum.
const DEFAULT_PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 200;

pub(crate) async fn execute(
    rest: &Rest,
    api: Api,
    hub: &HubName,
    op: Op,
    parts: &Parts,
    query: &Query,
    body: Body,
) -> Result<Response, RestError> {
    let executor = &*rest.executor;
    let v1 = matches!(api, Api::V1 | Api::V1Preview);
    // Success codes by API family: (2022-06-01, v1).
    let by_api = |current: StatusCode, older: StatusCode| if v1 { older } else { current };
    let apply = |command: Command| async move {
        let change = !matches!(command, Command::Check(_));
        executor
            .execute(hub, command)
            .await
            .map_err(|missing| RestError::missing(missing, change))
    };
    match op {
        Op::Send(recipient) => {
            let command = send_command(rest, hub, &recipient, parts, query, body).await?;
            apply(command).await?;
            Ok(status(StatusCode::ACCEPTED))
        }
        Op::Close(recipient) => close(executor, hub, &recipient, query, v1).await,
        Op::ConnectionExists(connection) => {
            apply(Check::connection(&connection)?).await?;
            Ok(status(StatusCode::OK))
        }
        Op::UserExists(user) => {
            apply(Check::user(&user)?).await?;
            Ok(status(StatusCode::OK))
        }
        Op::GroupExists(group) => {
            apply(Check::group(&group)?).await?;
            Ok(status(StatusCode::OK))
        }
        Op::UserInGroup { user, group } => {
            apply(Check::user_in_group(&user, &group)?).await?;
            Ok(status(StatusCode::OK))
        }
        Op::AddConnectionToGroup { group, connection } => {
            apply(Command::add_to_group(&connection, &group)?).await?;
            Ok(status(StatusCode::OK))
        }
        Op::RemoveConnectionFromGroup { group, connection } => {
            apply(Command::remove_from_group(&connection, Some(&group))?).await?;
            Ok(status(StatusCode::OK))
        }
        Op::RemoveConnectionFromAllGroups(connection) => {
            // Removing a connection that is gone from all groups is already done: 200.
            let _ = executor
                .execute(hub, Command::remove_from_group(&connection, None)?)
                .await;
            Ok(status(StatusCode::OK))
        }
        Op::AddUserToGroup { user, group } => {
            let ttl = ttl(query)?;
            apply(Command::user_join_group(&user, &group, ttl)?).await?;
            Ok(status(by_api(StatusCode::OK, StatusCode::ACCEPTED)))
        }
        Op::RemoveUserFromGroup { user, group } => {
            apply(Command::user_leave_group(&user, Some(&group))?).await?;
            Ok(status(by_api(StatusCode::NO_CONTENT, StatusCode::ACCEPTED)))
        }
        Op::RemoveUserFromAllGroups(user) => {
            apply(Command::user_leave_group(&user, None)?).await?;
            Ok(status(by_api(StatusCode::NO_CONTENT, StatusCode::OK)))
        }
        Op::ListGroupConnections(group) => {
            let group = GroupName::new(&group)?;
            list_group_connections(executor, hub, &group, parts, query).await
        }
    }
}

fn status(code: StatusCode) -> Response {
    code.into_response()
}

/// The send a request asks for: its body read (within the size and time limits) and, for an
/// invocation, encoded for the protocols the hub's connections use.
async fn send_command(
    rest: &Rest,
    hub: &HubName,
    recipient: &Recipient,
    parts: &Parts,
    query: &Query,
    body: Body,
) -> Result<Command, RestError> {
    let target = send_target(recipient, query)?;
    let config = &rest.shared.config;
    let limit = config.limits.max_request_body_size;
    let waited = config.timeouts.request_body_timeout;
    let read = body::read(&parts.headers, body, limit);
    let read = tokio::time::timeout(waited, read)
        .await
        .map_err(|_| RestError::BodyTimeout(waited))??;
    Ok(match read {
        SendBody::Invocation {
            target: method,
            arguments,
        } => Command::Send {
            payloads: rest.executor.encode_invocation(hub, &method, &arguments),
            target,
        },
        SendBody::Payloads(payloads) => Command::send_named(target, payloads),
    })
}

/// Closes what the request names; a connection that is gone is closed already.
async fn close(
    executor: &Executor,
    hub: &HubName,
    recipient: &Recipient,
    query: &Query,
    v1: bool,
) -> Result<Response, RestError> {
    let reason = query
        .get("reason")
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    let excluded = excluded(query)?;
    let (target, single) = close_target(recipient, excluded.clone())?;
    let command = Command::Close {
        target,
        excluded,
        reason,
    };
    let _ = executor.execute(hub, command).await;
    Ok(status(match (single, v1) {
        (true, false) => StatusCode::OK,
        (true, true) => StatusCode::ACCEPTED,
        (false, _) => StatusCode::NO_CONTENT,
    }))
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
async fn list_group_connections(
    executor: &Executor,
    hub: &HubName,
    group: &GroupName,
    parts: &Parts,
    query: &Query,
) -> Result<Response, RestError> {
    let page_size = positive(query, "maxpagesize", MAX_PAGE_SIZE)?.unwrap_or(DEFAULT_PAGE_SIZE);
    let top = positive(query, "top", i32::MAX as usize)?;
    let page = top.map_or(page_size, |top| top.min(page_size));
    let after = query.get("continuationToken").filter(|t| !t.is_empty());
    let mut members = executor.group_members(hub, group, after, page + 1).await;
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
