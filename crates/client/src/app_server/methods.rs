//! [`HubMethods`]: the application's hub, as the app server calls it. The app server runs
//! a client's invocations in order and hands each to the hub with a [`HubContext`] scoped to
//! that client's server connection; it never knows which hub it runs.

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::context::HubContext;

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

/// The methods clients can invoke on a hub.
pub trait HubMethods: Send + Sync + 'static {
    /// Runs `method` for `caller`. `context` sends through the caller's server connection, so
    /// what one invocation sends reaches each recipient in order.
    fn invoke(
        &self,
        context: HubContext,
        caller: Caller,
        method: String,
        arguments: Vec<Value>,
    ) -> BoxFuture<'static, MethodResult>;
}
