//! Entry points for the fuzz targets (through `crate::fuzzing`): the REST body parser and
//! route table, which are private to this module otherwise.

use axum::http::Method;
use axum::response::IntoResponse;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::Value;

use super::error::RestError;
use crate::fuzz_support::{body_of, header_map, poll_once};

/// A REST error as its response carries it: status and the JSON body
/// (`{"code":…,"message":…}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestFailure {
    pub status: u16,
    pub body: Bytes,
}

impl From<RestError> for RestFailure {
    fn from(error: RestError) -> Self {
        let response = error.into_response();
        let status = response.status().as_u16();
        let body = poll_once(response.into_body().collect())
            .and_then(Result::ok)
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        RestFailure { status, body }
    }
}

/// What a REST send body asks to deliver.
#[derive(Debug, Clone, PartialEq)]
pub enum SendBody {
    Invocation {
        target: String,
        arguments: Vec<Value>,
    },
    Payloads(Vec<(String, Bytes)>),
}

impl From<super::body::SendBody> for SendBody {
    fn from(body: super::body::SendBody) -> Self {
        match body {
            super::body::SendBody::Invocation { target, arguments } => {
                SendBody::Invocation { target, arguments }
            }
            super::body::SendBody::Payloads(payloads) => SendBody::Payloads(payloads),
        }
    }
}

/// Reads and parses a send body as the REST API does (`Content-Type` and `Content-Length`
/// taken from `headers`, `limit` bytes at most), the body arriving in the given pieces.
pub fn rest_read_body(
    headers: &[(&str, &[u8])],
    chunks: &[&[u8]],
    limit: usize,
) -> Result<SendBody, RestFailure> {
    let headers = header_map(headers);
    match poll_once(super::body::read(&headers, body_of(chunks), limit)) {
        Some(result) => result.map(SendBody::from).map_err(RestFailure::from),
        None => unreachable!("a body held in memory is read at once"),
    }
}

/// The JSON send body parser (`{"target":…,"arguments":[…]}`, names in any case).
pub fn rest_parse_invocation(bytes: &[u8]) -> Result<SendBody, RestFailure> {
    super::body::parse_invocation(bytes)
        .map(SendBody::from)
        .map_err(RestFailure::from)
}

/// The MessagePack send body parser (a map of protocol name to framed hub messages).
pub fn rest_parse_payloads(bytes: &[u8]) -> Result<Vec<(String, Bytes)>, RestFailure> {
    super::body::parse_payloads(bytes).map_err(RestFailure::from)
}

/// What a REST path and method resolve to; the API family and operation as their `Debug` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestRoute {
    Health,
    OpenApi,
    Hub {
        api: String,
        hub: String,
        op: String,
    },
}

/// A REST path split into percent-decoded segments.
pub fn rest_segments(path: &str) -> Result<Vec<String>, RestFailure> {
    super::routes::segments(path).map_err(RestFailure::from)
}

/// Decoded segments and a method → an operation (404 unknown path, 405 other method).
pub fn rest_resolve(segments: &[String], method: &Method) -> Result<RestRoute, RestFailure> {
    use super::routes::Operation;
    Ok(match super::routes::resolve(segments, method)? {
        Operation::Health => RestRoute::Health,
        Operation::OpenApi => RestRoute::OpenApi,
        Operation::Hub { api, hub, op } => RestRoute::Hub {
            api: format!("{api:?}"),
            hub,
            op: format!("{op:?}"),
        },
    })
}
