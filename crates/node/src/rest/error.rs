//! Every REST failure, and how it is written: one place for status, `x-ms-error-code` and the
//! `ErrorDetail`-shaped JSON body (`{"code":…,"message":…}`).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use switchyard_core::NameError;

use crate::command::Missing;
use crate::throttle::Refusal;

/// `x-ms-error-code` values the Management SDK treats as an expected 404 (spec §4.1).
pub(crate) mod codes {
    pub(crate) const CONNECTION_NOT_EXISTED: &str = "Warning.Connection.NotExisted";
    pub(crate) const USER_NOT_EXISTED: &str = "Warning.User.NotExisted";
    pub(crate) const GROUP_NOT_EXISTED: &str = "Warning.Group.NotExisted";
    pub(crate) const USER_NOT_IN_GROUP: &str = "Info.User.NotInGroup";
    /// A membership change named a connection that does not exist.
    pub(crate) const CONNECTION_NOT_EXISTED_ERROR: &str = "Error.Connection.NotExisted";
}

/// The header the Management SDK reads to classify error responses.
pub(crate) const ERROR_CODE_HEADER: &str = "x-ms-error-code";

/// A REST request that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RestError {
    /// Invalid name, query parameter or body.
    BadRequest(String),
    /// Missing or unacceptable bearer token.
    Unauthorized(String),
    /// An unknown route (`error_code: None`) or a resource that does not exist (with the
    /// `x-ms-error-code` the SDK expects).
    NotFound {
        error_code: Option<&'static str>,
        message: String,
    },
    /// The body is larger than `limits.max_request_body_size` (the limit is given).
    PayloadTooLarge(usize),
    /// The path exists but not for this method; the methods it does take.
    MethodNotAllowed(Vec<&'static str>),
    /// The body did not arrive within `timeouts.request_body_timeout` (given).
    BodyTimeout(std::time::Duration),
    /// A configured limit refused the request (the text names it).
    LimitReached(String),
    /// Over `throttling.rest_rate_per_key`: 429 with `Retry-After`.
    Throttled(Refusal),
}

impl RestError {
    pub(crate) fn not_found(error_code: &'static str, message: impl Into<String>) -> Self {
        RestError::NotFound {
            error_code: Some(error_code),
            message: message.into(),
        }
    }

    /// The one place a miss becomes a REST answer: 404 with the `x-ms-error-code` the
    /// Management SDK reads as an expected "no" (and the miss's own text). `change`: the
    /// request wanted to change something (a membership), not just to know.
    pub(crate) fn missing(missing: Missing, change: bool) -> Self {
        if missing.is_limit() {
            return RestError::LimitReached(missing.to_string());
        }
        let code = match &missing {
            Missing::Connection(_) if change => codes::CONNECTION_NOT_EXISTED_ERROR,
            Missing::Connection(_) => codes::CONNECTION_NOT_EXISTED,
            Missing::User(_) => codes::USER_NOT_EXISTED,
            Missing::Group(_) => codes::GROUP_NOT_EXISTED,
            Missing::UserInGroup(..) => codes::USER_NOT_IN_GROUP,
            Missing::ConnectionGroupsFull(..) | Missing::UserGroupsFull(..) => {
                unreachable!("limits are answered above")
            }
        };
        RestError::not_found(code, missing.to_string())
    }

    pub(crate) fn no_route() -> Self {
        RestError::NotFound {
            error_code: None,
            message: "no REST API route matches this path".into(),
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            RestError::BadRequest(_) => StatusCode::BAD_REQUEST,
            RestError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            RestError::NotFound { .. } => StatusCode::NOT_FOUND,
            RestError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            RestError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            RestError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            RestError::LimitReached(_) => StatusCode::TOO_MANY_REQUESTS,
            RestError::Throttled(refusal) if refusal.why.is_rate() => StatusCode::TOO_MANY_REQUESTS,
            RestError::Throttled(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The `code` of the body; also sent as `x-ms-error-code` when it is one of [`codes`].
    fn code(&self) -> &'static str {
        match self {
            RestError::BadRequest(_) => "BadRequest",
            RestError::Unauthorized(_) => "Unauthorized",
            RestError::NotFound {
                error_code: Some(code),
                ..
            } => code,
            RestError::NotFound {
                error_code: None, ..
            } => "NotFound",
            RestError::PayloadTooLarge(_) => "PayloadTooLarge",
            RestError::MethodNotAllowed(_) => "MethodNotAllowed",
            RestError::BodyTimeout(_) => "RequestTimeout",
            RestError::LimitReached(_) => "LimitReached",
            RestError::Throttled(_) => "TooManyRequests",
        }
    }

    fn message(&self) -> String {
        match self {
            RestError::BadRequest(message)
            | RestError::LimitReached(message)
            | RestError::Unauthorized(message)
            | RestError::NotFound { message, .. } => message.clone(),
            RestError::PayloadTooLarge(limit) => {
                format!("the request body is larger than the limit of {limit} bytes")
            }
            RestError::MethodNotAllowed(allowed) => format!(
                "this route does not support the request method; allowed: {}",
                allowed.join(", ")
            ),
            RestError::BodyTimeout(limit) => format!(
                "the request body did not arrive within {}",
                humantime::format_duration(*limit)
            ),
            RestError::Throttled(refusal) => format!(
                "{}; retry after {} s",
                refusal.why.message(),
                refusal.retry_after_secs
            ),
        }
    }
}

impl From<NameError> for RestError {
    fn from(error: NameError) -> Self {
        RestError::BadRequest(error.to_string())
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"code": self.code(), "message": self.message()});
        let mut response = (
            self.status(),
            [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
            body.to_string(),
        )
            .into_response();
        let headers = response.headers_mut();
        match &self {
            RestError::NotFound {
                error_code: Some(code),
                ..
            } => {
                headers.insert(ERROR_CODE_HEADER, HeaderValue::from_static(code));
            }
            RestError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            RestError::MethodNotAllowed(allowed) => {
                if let Ok(value) = HeaderValue::from_str(&allowed.join(", ")) {
                    headers.insert(header::ALLOW, value);
                }
            }
            RestError::Throttled(refusal) => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(refusal.retry_after_secs),
                );
            }
            _ => {}
        }
        response
    }
}
