//! Client results (spec §1.9): invocations this server made and waits on ("caller"), and
//! invocations another server made to a client pinned here ("router").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::oneshot;

use super::config::random_hex;
use super::error::InvokeError;

struct Call {
    connection_id: String,
    tx: oneshot::Sender<Result<Value, InvokeError>>,
}

/// Where a router must send a client's completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    pub connection_id: String,
    pub caller_server_id: String,
}

pub struct Results {
    /// Random per app server, the middle part of invocation ids (the SDK's manager id).
    prefix: String,
    counter: AtomicU64,
    calls: Mutex<HashMap<String, Call>>,
    routed: Mutex<HashMap<String, Routed>>,
}

impl Default for Results {
    fn default() -> Self {
        Results {
            prefix: random_hex(8),
            counter: AtomicU64::new(0),
            calls: Mutex::default(),
            routed: Mutex::default(),
        }
    }
}

impl Results {
    /// Registers a call to `connection_id`: `{connectionId}-{random}-{counter}` and the
    /// receiver of its result.
    pub fn start(
        &self,
        connection_id: &str,
    ) -> (String, oneshot::Receiver<Result<Value, InvokeError>>) {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("{connection_id}-{}-{n}", self.prefix);
        let (tx, rx) = oneshot::channel();
        self.calls.lock().insert(
            id.clone(),
            Call {
                connection_id: connection_id.to_owned(),
                tx,
            },
        );
        (id, rx)
    }

    /// Completes a call this server made; `false` if the id is not ours (or done).
    pub fn complete(&self, invocation_id: &str, result: Result<Value, InvokeError>) -> bool {
        match self.calls.lock().remove(invocation_id) {
            Some(call) => {
                let _ = call.tx.send(result);
                true
            }
            None => false,
        }
    }

    pub fn is_caller_of(&self, invocation_id: &str) -> bool {
        self.calls.lock().contains_key(invocation_id)
    }

    pub fn forget(&self, invocation_id: &str) {
        self.calls.lock().remove(invocation_id);
        self.routed.lock().remove(invocation_id);
    }

    /// A ClientInvocation from the service: this server routes the client's answer.
    pub fn route(&self, invocation_id: String, routed: Routed) {
        self.routed.lock().insert(invocation_id, routed);
    }

    pub fn take_route(&self, invocation_id: &str) -> Option<Routed> {
        self.routed.lock().remove(invocation_id)
    }

    /// The client left: its calls fail, its routes are dropped.
    pub fn client_gone(&self, connection_id: &str) {
        let gone: Vec<Call> = {
            let mut calls = self.calls.lock();
            let ids: Vec<String> = calls
                .iter()
                .filter(|(_, c)| c.connection_id == connection_id)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| calls.remove(id)).collect()
        };
        for call in gone {
            let _ = call
                .tx
                .send(Err(InvokeError::Disconnected(call.connection_id.clone())));
        }
        self.routed
            .lock()
            .retain(|_, r| r.connection_id != connection_id);
    }

    /// Everything pending is dropped (the app server stopped).
    pub fn clear(&self) {
        self.calls.lock().clear();
        self.routed.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ids_and_disconnect() {
        let r = Results::default();
        let (a, rx_a) = r.start("c1");
        let (b, _rx_b) = r.start("c2");
        assert!(a.starts_with("c1-") && a.ends_with("-1"), "{a}");
        assert!(b.ends_with("-2"));
        r.client_gone("c1");
        assert_eq!(
            rx_a.await.unwrap(),
            Err(InvokeError::Disconnected("c1".into()))
        );
        assert!(r.is_caller_of(&b));
        assert!(r.complete(&b, Ok(Value::from(3))));
        assert!(!r.complete(&b, Ok(Value::Null)));
    }
}
