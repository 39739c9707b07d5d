//! [`HubMethods`]: the application's hub, as the app server calls it. The app server runs
//! a client's invocations in order and hands each to the hub with a [`HubContext`] scoped to
//! that client's server connection; it never knows which hub it runs.
//!
//! Streams, both ways (hub protocol §4.4): an invocation listing `streamIds` hands the method
//! one [`ClientStream`] per id, in that order; a StreamInvocation calls [`HubMethods::stream`],
//! whose [`ItemStream`] the app server sends as StreamItems and then a Completion. Both run in
//! the background once started, as in ASP.NET Core, so the client's later messages (its
//! stream items, cancels, other invocations) are not held up behind them.

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use serde_json::Value;

use super::context::HubContext;
use super::upload::ClientStream;

/// Who invoked a hub method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub connection_id: String,
    pub user_id: Option<String>,
    /// The service instance holding the client (`Asrs-Instance-Id`), when the service says.
    pub instance_id: Option<String>,
}

/// `Ok(None)` for a void method (a Completion without result), `Ok(Some(v))` for a result,
/// `Err(text)` for an error completion.
pub type MethodResult = Result<Option<Value>, String>;

/// What a streaming method yields: each `Ok` is sent as a StreamItem; an `Err` ends the
/// stream with an error Completion; the end of the stream sends a plain Completion. The
/// stream is dropped when the client cancels it (CancelInvocation) or leaves.
pub type ItemStream = BoxStream<'static, Result<Value, String>>;

/// The outcome of starting a streaming method: its items, or the error to complete with.
pub type StreamResult = Result<ItemStream, String>;

/// The methods clients can invoke on a hub.
pub trait HubMethods: Send + Sync + 'static {
    /// Runs `method` for `caller`. `context` sends through the caller's server connection, so
    /// what one invocation sends reaches each recipient in order. `streams` are the client's
    /// upload streams (empty for a plain invocation).
    fn invoke(
        &self,
        context: HubContext,
        caller: Caller,
        method: String,
        arguments: Vec<Value>,
        streams: Vec<ClientStream>,
    ) -> BoxFuture<'static, MethodResult>;

    /// Starts streaming `method` for `caller` (the client's `stream(method, …)`). The
    /// returned future should resolve promptly: the client's next invocation waits for it;
    /// the work belongs in the stream. By default no method streams.
    fn stream(
        &self,
        context: HubContext,
        caller: Caller,
        method: String,
        arguments: Vec<Value>,
        streams: Vec<ClientStream>,
    ) -> BoxFuture<'static, StreamResult> {
        let _ = (context, caller, arguments, streams);
        Box::pin(async move { Err(format!("Unknown hub method '{method}'")) })
    }
}
