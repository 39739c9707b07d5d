//! [`Admin`]: a session on a node's dashboard admin hub (`/dashboard/hub`), as the page opens
//! one: no negotiate, WebSockets, the JSON hub protocol.

use serde_json::Value;
use switchyard_hub_protocol::{encode_message, CompletionResult, Format, HubMessage};

use crate::raw_client::RawClient;
use crate::server::TestServer;
use crate::wait::WAIT;

pub struct Admin {
    client: RawClient,
    next_id: u32,
}

impl Admin {
    /// Opens a session with `token` (empty: none, for development mode).
    pub async fn open(server: &TestServer, token: &str) -> Admin {
        let url = format!("ws://{}/dashboard/hub", server.addr);
        let mut client = RawClient::start_url(&url, token, Format::Json).await;
        client.handshake_result().await.expect("admin handshake");
        Admin { client, next_id: 0 }
    }

    /// Invokes `method` and waits for its completion, skipping pushes meanwhile.
    pub async fn invoke(&mut self, method: &str, arguments: &[Value]) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id.to_string();
        let message = HubMessage::Invocation {
            headers: Default::default(),
            invocation_id: Some(id.clone()),
            target: method.into(),
            arguments: arguments.to_vec(),
            stream_ids: None,
        };
        self.client
            .send_raw(&encode_message(Format::Json, &message))
            .await;
        let deadline = tokio::time::Instant::now() + WAIT * 2;
        loop {
            let message = tokio::time::timeout_at(deadline, self.client.next_message())
                .await
                .unwrap_or_else(|_| panic!("no completion of {method}"));
            if let HubMessage::Completion {
                invocation_id,
                result,
                ..
            } = message
            {
                if invocation_id == id {
                    return match result {
                        CompletionResult::Void => Ok(Value::Null),
                        CompletionResult::Value(value) => Ok(value),
                        CompletionResult::Error(error) => Err(error),
                    };
                }
            }
        }
    }

    /// Reads until the service ends the session; the Close message if one came.
    pub async fn until_closed(&mut self) -> Option<HubMessage<Value>> {
        self.client.until_closed().await
    }

    /// The arguments of the next push of `target` that `accept` takes.
    pub async fn push(&mut self, target: &str, accept: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + WAIT * 2;
        loop {
            let message = tokio::time::timeout_at(deadline, self.client.next_message())
                .await
                .unwrap_or_else(|_| panic!("no '{target}' push as expected"));
            if let HubMessage::Invocation {
                target: got,
                arguments,
                ..
            } = message
            {
                if got == target && accept(&arguments) {
                    return arguments;
                }
            }
        }
    }
}

/// The hub named `name` in a dashboard snapshot.
pub fn hub_of<'a>(snapshot: &'a Value, name: &str) -> Option<&'a Value> {
    snapshot["hubs"]
        .as_array()?
        .iter()
        .find(|hub| hub["name"] == name)
}
