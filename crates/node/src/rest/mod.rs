//! The data-plane REST API: 2022-06-01 (`/api/hubs/…`, plus the 2024-12-01 group listing),
//! v1 (`/api/v1/hubs/…`) and v1-preview (`/api/v1-preview/hub/…`), as thin adapters over the
//! executor. The route table is in `routes`, its documentation in
//! `docs/openapi.json` (served at `GET /api/openapi.json`).
//!
//! # Layout
//! - `routes`: path segments + method → an operation (404 unknown path, 405 other method).
//! - `ops`: turns an operation into a command for the executor; success codes per API version.
//! - `body`: JSON and MessagePack send bodies, with the body size limit.
//! - `error`: [`error::RestError`], the one place errors become responses.
//! - `fuzz` (feature `fuzzing`): entry points for the fuzz targets.
//!
//! # Rules
//! - Health (`/api/health`, `/api/v1/health`) and the OpenAPI document need no token; every
//!   hub route needs `Authorization: Bearer <JWT>` whose `aud` names this request (see
//!   `switchyard_auth::audience_matches`: with or without query, port ignored).
//! - Hub routes are throttled per access key (`throttling.rest_rate_per_key`) once the token
//!   is verified, so unsigned requests cannot spend a key's allowance.
//! - `application` (any version) prefixes the hub: `{application}_{hub}`, lower-cased.
//! - `api-version` is accepted whatever its value, and may be absent.
//! - `excluded` (repeatable): empty values are skipped, others must be valid connection ids
//!   (400 otherwise); they apply to sends and to every close.
//! - Send bodies are JSON unless `Content-Type` is `application/x-msgpack`,
//!   `application/msgpack` or `application/octet-stream` (a payloads map).

mod body;
mod error;
/// The body parser and route table for the fuzz targets (`crate::fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) mod fuzz;
mod ops;
mod routes;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use switchyard_auth::{Strictness, VerifiedToken};
use switchyard_core::HubName;

use crate::cluster::Cluster;
use crate::executor::Executor;
use crate::http::Query;
use crate::metrics::{status_class, StatusLabel};
use crate::shared::Shared;
use error::RestError;
use routes::{Api, Operation};

/// This API's OpenAPI 3 description.
const OPENAPI: &str = include_str!("../../../../docs/openapi.json");

/// What the REST API works with.
pub(crate) struct Rest {
    pub(crate) shared: Arc<Shared>,
    pub(crate) executor: Arc<Executor>,
    pub(crate) cluster: Arc<Cluster>,
}

pub(crate) fn routes() -> axum::Router<Arc<Rest>> {
    axum::Router::new().route("/api/{*path}", any(dispatch))
}

async fn dispatch(State(rest): State<Arc<Rest>>, request: Request) -> Response {
    let response = match handle(&rest, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    rest.shared
        .metrics
        .rest_requests
        .get_or_create(&StatusLabel {
            status: status_class(response.status().as_u16()),
        })
        .inc();
    response
}

/// 200 while the node serves. A node of a cluster whose backplane does not answer still
/// serves its own clients, so it stays 200, says `degraded` in a header and the body, and
/// lets a balancer's check tell it apart (docs/cluster.md, "Failures").
fn health(cluster: &Cluster) -> Response {
    if cluster.members().backplane_healthy() {
        return StatusCode::OK.into_response();
    }
    (
        StatusCode::OK,
        [(
            axum::http::HeaderName::from_static("x-switchyard-health"),
            "degraded",
        )],
        "degraded: the backplane does not answer; serving this node's own clients only\n",
    )
        .into_response()
}

async fn handle(rest: &Rest, request: Request) -> Result<Response, RestError> {
    let (parts, body) = request.into_parts();
    let segments = routes::segments(parts.uri.path())?;
    match routes::resolve(&segments, &parts.method)? {
        Operation::Health => Ok(health(&rest.cluster)),
        Operation::OpenApi => Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            OPENAPI,
        )
            .into_response()),
        Operation::Hub { api, hub, op } => {
            let token = authorize(&rest.shared, &parts, api)?;
            rest.shared
                .throttle
                .rest(token.signed_with, &rest.shared.metrics)
                .map_err(RestError::Throttled)?;
            let query = Query::parse(&parts.uri);
            let hub = HubName::new(&hub, query.get("application"))?;
            ops::execute(rest, api, &hub, op, &parts, &query, body).await
        }
    }
}

/// Checks the `Authorization: Bearer` token (header only) against this request's URL. User,
/// group and connection names in the path compare exactly (a token for user `alice` does not
/// send to `ALICE`), and a request naming an `application` needs a token naming it too.
fn authorize(shared: &Shared, parts: &Parts, api: Api) -> Result<VerifiedToken, RestError> {
    let token = parts
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(switchyard_auth::bearer_token)
        .ok_or_else(|| {
            RestError::Unauthorized(
                "an 'Authorization: Bearer <access token>' header is required".into(),
            )
        })?;
    // Segments after the hub alternate literal, name: `users/{user}/groups/{group}`.
    let hub_segment = match api {
        Api::V20220601 => 2,
        Api::V1 | Api::V1Preview => 3,
    };
    let names = [hub_segment + 2, hub_segment + 4];
    let strict = Strictness {
        exact_segments: &names,
    };
    shared
        .auth
        .authenticate(
            crate::auth::Use::Repeated,
            Some(token),
            parts.uri.path(),
            parts.uri.query(),
            &strict,
        )
        .map_err(|e| RestError::Unauthorized(e.to_string()))
}
