//! The REST route table: percent-decoded path segments and a method → an [`Operation`].
//!
//! Hand-written rather than axum routes because Azure paths put literal `:send` /
//! `:closeConnections` segments where a `{param}` could also stand. Literal segments match
//! ignoring ASCII case, as ASP.NET routing does; captured names keep their case.

use axum::http::Method;
use percent_encoding::percent_decode_str;

use super::error::RestError;

/// Which API family a route belongs to; success codes differ between them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Api {
    /// `/api/hubs/…` (`api-version=2022-06-01` and later).
    V20220601,
    /// `/api/v1/hubs/…`.
    V1,
    /// `/api/v1-preview/hub/…` (obsolete; sends only).
    V1Preview,
}

/// Who a send or close is for, as raw (not yet validated) names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Recipient {
    All,
    User(String),
    /// Comma-separated user ids (v1-preview).
    UserList(String),
    Connection(String),
    Group(String),
    /// Comma-separated group names (v1-preview).
    GroupList(String),
}

/// One operation on a hub, with raw names from the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Send(Recipient),
    Close(Recipient),
    ConnectionExists(String),
    UserExists(String),
    GroupExists(String),
    UserInGroup { user: String, group: String },
    AddConnectionToGroup { group: String, connection: String },
    RemoveConnectionFromGroup { group: String, connection: String },
    RemoveConnectionFromAllGroups(String),
    AddUserToGroup { user: String, group: String },
    RemoveUserFromGroup { user: String, group: String },
    RemoveUserFromAllGroups(String),
    ListGroupConnections(String),
}

/// What a request path and method resolve to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// `/api/health`, `/api/v1/health`: no authentication.
    Health,
    /// `/api/openapi.json`: no authentication.
    OpenApi,
    /// Everything under a hub: bearer token required.
    Hub { api: Api, hub: String, op: Op },
}

/// The methods routes use. HEAD is listed explicitly where GET is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verb {
    Get,
    Head,
    Post,
    Put,
    Delete,
}

impl Verb {
    fn of(method: &Method) -> Option<Verb> {
        Some(match *method {
            Method::GET => Verb::Get,
            Method::HEAD => Verb::Head,
            Method::POST => Verb::Post,
            Method::PUT => Verb::Put,
            Method::DELETE => Verb::Delete,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Head => "HEAD",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Delete => "DELETE",
        }
    }
}

/// Splits a raw path into percent-decoded segments (one trailing `/` ignored). Encoded
/// slashes (`%2F`) stay inside their segment.
pub(crate) fn segments(path: &str) -> Result<Vec<String>, RestError> {
    let path = path.strip_prefix('/').unwrap_or(path);
    let path = path.strip_suffix('/').unwrap_or(path);
    path.split('/')
        .map(|segment| {
            let segment = percent_decode_str(segment)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| {
                    RestError::BadRequest("the path is not valid percent-encoded UTF-8".into())
                })?;
            // Refused whether written `..` or `%2e%2e`, so no spelling of a path reaches a
            // different route (or a different answer) than another.
            if segment == "." || segment == ".." {
                return Err(RestError::BadRequest(
                    "the path has a '.' or '..' segment (literal or percent-encoded), which the REST API does not resolve".into(),
                ));
            }
            Ok(segment)
        })
        .collect()
}

/// Resolves decoded segments and a method. Unknown path → 404; known path, other method → 405.
pub(crate) fn resolve(segments: &[String], method: &Method) -> Result<Operation, RestError> {
    let verb = Verb::of(method);
    let s: Vec<&str> = segments.iter().map(String::as_str).collect();
    match s.as_slice() {
        [api, health] if lit(api, "api") && lit(health, "health") => {
            get_or_head(verb, Operation::Health)
        }
        [api, v1, health] if lit(api, "api") && lit(v1, "v1") && lit(health, "health") => {
            get_or_head(verb, Operation::Health)
        }
        [api, doc] if lit(api, "api") && lit(doc, "openapi.json") => {
            get_or_head(verb, Operation::OpenApi)
        }
        [api, hubs, hub, rest @ ..] if lit(api, "api") && lit(hubs, "hubs") => {
            hub_operation(Api::V20220601, hub, pick(verb, v2022_routes(rest))?)
        }
        [api, v1, hubs, hub, rest @ ..]
            if lit(api, "api") && lit(v1, "v1") && lit(hubs, "hubs") =>
        {
            hub_operation(Api::V1, hub, pick(verb, v1_routes(rest))?)
        }
        [api, preview, hub_literal, hub, rest @ ..]
            if lit(api, "api") && lit(preview, "v1-preview") && lit(hub_literal, "hub") =>
        {
            hub_operation(Api::V1Preview, hub, pick(verb, preview_routes(rest))?)
        }
        _ => Err(RestError::no_route()),
    }
}

fn hub_operation(api: Api, hub: &str, op: Op) -> Result<Operation, RestError> {
    Ok(Operation::Hub {
        api,
        hub: hub.to_string(),
        op,
    })
}

fn get_or_head(verb: Option<Verb>, operation: Operation) -> Result<Operation, RestError> {
    pick(
        verb,
        Some(vec![
            (Verb::Get, operation.clone()),
            (Verb::Head, operation),
        ]),
    )
}

/// The entry for `verb` among a path's `(verb, what)` choices; `None` choices = unknown path.
fn pick<T>(verb: Option<Verb>, choices: Option<Vec<(Verb, T)>>) -> Result<T, RestError> {
    let Some(choices) = choices else {
        return Err(RestError::no_route());
    };
    let allowed: Vec<&'static str> = choices.iter().map(|(v, _)| v.name()).collect();
    choices
        .into_iter()
        .find(|(v, _)| Some(*v) == verb)
        .map(|(_, what)| what)
        .ok_or(RestError::MethodNotAllowed(allowed))
}

fn exists(op: Op) -> [(Verb, Op); 2] {
    [(Verb::Get, op.clone()), (Verb::Head, op)]
}

fn lit(segment: &str, literal: &str) -> bool {
    segment.eq_ignore_ascii_case(literal)
}

/// Routes below `/api/hubs/{hub}` (2022-06-01, plus the 2024-12-01 group listing).
fn v2022_routes(rest: &[&str]) -> Option<Vec<(Verb, Op)>> {
    use Verb::*;
    let own = |s: &str| s.to_string();
    Some(match rest {
        [action] if lit(action, ":send") => vec![(Post, Op::Send(Recipient::All))],
        [action] if lit(action, ":closeConnections") => {
            vec![(Post, Op::Close(Recipient::All))]
        }
        [users, user] if lit(users, "users") => exists(Op::UserExists(own(user))).to_vec(),
        [users, user, action] if lit(users, "users") && lit(action, ":send") => {
            vec![(Post, Op::Send(Recipient::User(own(user))))]
        }
        [users, user, action] if lit(users, "users") && lit(action, ":closeConnections") => {
            vec![(Post, Op::Close(Recipient::User(own(user))))]
        }
        [users, user, groups] if lit(users, "users") && lit(groups, "groups") => {
            vec![(Delete, Op::RemoveUserFromAllGroups(own(user)))]
        }
        [users, user, groups, group] if lit(users, "users") && lit(groups, "groups") => {
            user_group_routes(user, group)
        }
        [connections, connection] if lit(connections, "connections") => {
            let mut routes = exists(Op::ConnectionExists(own(connection))).to_vec();
            routes.push((Delete, Op::Close(Recipient::Connection(own(connection)))));
            routes
        }
        [connections, connection, action]
            if lit(connections, "connections") && lit(action, ":send") =>
        {
            vec![(Post, Op::Send(Recipient::Connection(own(connection))))]
        }
        [connections, connection, groups]
            if lit(connections, "connections") && lit(groups, "groups") =>
        {
            vec![(Delete, Op::RemoveConnectionFromAllGroups(own(connection)))]
        }
        [groups, group] if lit(groups, "groups") => exists(Op::GroupExists(own(group))).to_vec(),
        [groups, group, action] if lit(groups, "groups") && lit(action, ":send") => {
            vec![(Post, Op::Send(Recipient::Group(own(group))))]
        }
        [groups, group, action] if lit(groups, "groups") && lit(action, ":closeConnections") => {
            vec![(Post, Op::Close(Recipient::Group(own(group))))]
        }
        [groups, group, connections]
            if lit(groups, "groups") && lit(connections, "connections") =>
        {
            exists(Op::ListGroupConnections(own(group))).to_vec()
        }
        [groups, group, connections, connection]
            if lit(groups, "groups") && lit(connections, "connections") =>
        {
            group_connection_routes(group, connection)
        }
        _ => return None,
    })
}

/// Routes below `/api/v1/hubs/{hub}`.
fn v1_routes(rest: &[&str]) -> Option<Vec<(Verb, Op)>> {
    use Verb::*;
    let own = |s: &str| s.to_string();
    Some(match rest {
        [] => vec![(Post, Op::Send(Recipient::All))],
        [users, user] if lit(users, "users") => {
            let mut routes = vec![(Post, Op::Send(Recipient::User(own(user))))];
            routes.extend(exists(Op::UserExists(own(user))));
            routes
        }
        [users, user, groups] if lit(users, "users") && lit(groups, "groups") => {
            vec![(Delete, Op::RemoveUserFromAllGroups(own(user)))]
        }
        [connections, connection] if lit(connections, "connections") => {
            let mut routes = vec![(Post, Op::Send(Recipient::Connection(own(connection))))];
            routes.extend(exists(Op::ConnectionExists(own(connection))));
            routes.push((Delete, Op::Close(Recipient::Connection(own(connection)))));
            routes
        }
        [groups, group] if lit(groups, "groups") => {
            let mut routes = vec![(Post, Op::Send(Recipient::Group(own(group))))];
            routes.extend(exists(Op::GroupExists(own(group))));
            routes
        }
        [groups, group, connections, connection]
            if lit(groups, "groups") && lit(connections, "connections") =>
        {
            group_connection_routes(group, connection)
        }
        [groups, group, users, user] if lit(groups, "groups") && lit(users, "users") => {
            user_group_routes(user, group)
        }
        _ => return None,
    })
}

/// Routes below `/api/v1-preview/hub/{hub}`: sends only.
fn preview_routes(rest: &[&str]) -> Option<Vec<(Verb, Op)>> {
    let own = |s: &str| s.to_string();
    let recipient = match rest {
        [] => Recipient::All,
        [kind, user] if lit(kind, "user") => Recipient::User(own(user)),
        [kind, users] if lit(kind, "users") => Recipient::UserList(own(users)),
        [kind, group] if lit(kind, "group") => Recipient::Group(own(group)),
        [kind, groups] if lit(kind, "groups") => Recipient::GroupList(own(groups)),
        _ => return None,
    };
    Some(vec![(Verb::Post, Op::Send(recipient))])
}

fn user_group_routes(user: &str, group: &str) -> Vec<(Verb, Op)> {
    let (user, group) = (user.to_string(), group.to_string());
    let mut routes = vec![
        (
            Verb::Put,
            Op::AddUserToGroup {
                user: user.clone(),
                group: group.clone(),
            },
        ),
        (
            Verb::Delete,
            Op::RemoveUserFromGroup {
                user: user.clone(),
                group: group.clone(),
            },
        ),
    ];
    routes.extend(exists(Op::UserInGroup { user, group }));
    routes
}

fn group_connection_routes(group: &str, connection: &str) -> Vec<(Verb, Op)> {
    let (group, connection) = (group.to_string(), connection.to_string());
    vec![
        (
            Verb::Put,
            Op::AddConnectionToGroup {
                group: group.clone(),
                connection: connection.clone(),
            },
        ),
        (
            Verb::Delete,
            Op::RemoveConnectionFromGroup { group, connection },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(method: Method, path: &str) -> Result<Operation, RestError> {
        resolve(&segments(path)?, &method)
    }

    fn hub_op(method: Method, path: &str) -> (Api, String, Op) {
        match route(method, path) {
            Ok(Operation::Hub { api, hub, op }) => (api, hub, op),
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn action_segments_and_names() {
        assert_eq!(
            hub_op(Method::POST, "/api/hubs/Chat/:send"),
            (Api::V20220601, "Chat".into(), Op::Send(Recipient::All))
        );
        assert_eq!(
            hub_op(Method::POST, "/api/hubs/chat/users/a%2Fb/:send").2,
            Op::Send(Recipient::User("a/b".into()))
        );
        assert_eq!(
            hub_op(Method::POST, "/api/hubs/chat/groups/g/%3AcloseConnections").2,
            Op::Close(Recipient::Group("g".into()))
        );
        // A group may be called ":send" where no action is expected.
        assert_eq!(
            hub_op(Method::HEAD, "/api/hubs/chat/groups/:send").2,
            Op::GroupExists(":send".into())
        );
        assert_eq!(
            hub_op(Method::GET, "/API/HUBS/chat/Users/u/Groups/g/").2,
            Op::UserInGroup {
                user: "u".into(),
                group: "g".into()
            }
        );
    }

    #[test]
    fn versions() {
        assert_eq!(hub_op(Method::POST, "/api/v1/hubs/chat").0, Api::V1);
        assert_eq!(
            hub_op(Method::POST, "/api/v1-preview/hub/chat/users/a,b").2,
            Op::Send(Recipient::UserList("a,b".into()))
        );
        assert_eq!(route(Method::HEAD, "/api/v1/health"), Ok(Operation::Health));
        assert_eq!(route(Method::GET, "/api/health"), Ok(Operation::Health));
    }

    #[test]
    fn not_found_and_not_allowed() {
        assert_eq!(
            route(Method::GET, "/api/hubs/chat/nothing"),
            Err(RestError::no_route())
        );
        assert_eq!(route(Method::GET, "/api/hubs"), Err(RestError::no_route()));
        assert_eq!(
            route(Method::GET, "/api/hubs/chat/:send"),
            Err(RestError::MethodNotAllowed(vec!["POST"]))
        );
        assert_eq!(
            route(Method::PATCH, "/api/v1/hubs/chat/groups/g"),
            Err(RestError::MethodNotAllowed(vec!["POST", "GET", "HEAD"]))
        );
        assert!(matches!(
            route(Method::GET, "/api/hubs/chat/users/%FF"),
            Err(RestError::BadRequest(_))
        ));
    }
}
