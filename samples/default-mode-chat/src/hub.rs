//! The chat hub the app server runs for its clients: rooms are groups, and a poll is a client
//! result — the app server asks each member of the room for an answer
//! ([`HubContext::invoke_client`]) and tells the room what they said.
//!
//! Methods: `Join(name, room)`, `Send(text)`, `Poll(question)` (returns the answers),
//! `Leave()`. Clients receive `newMessage(name, text)`, `notice(text)`,
//! `pollResult(question, answers)`, and are asked `answerPoll(question, asker)`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, BoxFuture};
use parking_lot::Mutex;
use serde_json::{json, Value};
use switchyard_client::app_server::{Caller, ClientStream, HubContext, HubMethods, MethodResult};

/// How long a member has to answer a poll; silence counts as "no answer".
const POLL_ANSWER_TIMEOUT: Duration = Duration::from_secs(20);
const MAX_NAME: usize = 32;
const MAX_TEXT: usize = 500;

#[derive(Clone)]
struct Member {
    name: String,
    room: String,
}

/// Who is in which room, by connection id.
#[derive(Default)]
pub struct ChatHub {
    members: Mutex<HashMap<String, Member>>,
}

fn text_argument(
    arguments: &[Value],
    index: usize,
    what: &str,
    max: usize,
) -> Result<String, String> {
    let text = arguments
        .get(index)
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default();
    if text.is_empty() || text.chars().count() > max {
        return Err(format!("{what} must be 1 to {max} characters"));
    }
    Ok(text.to_owned())
}

fn send_failed(error: impl std::fmt::Display) -> String {
    format!("the service connection failed: {error}")
}

impl ChatHub {
    fn member(&self, connection_id: &str) -> Result<Member, String> {
        self.members
            .lock()
            .get(connection_id)
            .cloned()
            .ok_or_else(|| "join a room first".to_owned())
    }

    fn room_members(&self, room: &str) -> Vec<(String, Member)> {
        let members = self.members.lock();
        members
            .iter()
            .filter(|(_, member)| member.room == room)
            .map(|(id, member)| (id.clone(), member.clone()))
            .collect()
    }

    async fn join(
        &self,
        context: HubContext,
        caller: Caller,
        arguments: Vec<Value>,
    ) -> MethodResult {
        let name = text_argument(&arguments, 0, "a name", MAX_NAME)?;
        let room = text_argument(&arguments, 1, "a room", MAX_NAME)?;
        // Acknowledged: once it returns, sends to the room reach the new member.
        context
            .add_to_group(&caller.connection_id, &room)
            .await
            .map_err(send_failed)?;
        let notice = format!("{name} joined {room}");
        self.members.lock().insert(
            caller.connection_id,
            Member {
                name,
                room: room.clone(),
            },
        );
        context
            .send_group(&room, &[], "notice", &[json!(notice)])
            .map_err(send_failed)?;
        Ok(None)
    }

    fn say(&self, context: HubContext, caller: Caller, arguments: Vec<Value>) -> MethodResult {
        let member = self.member(&caller.connection_id)?;
        let text = text_argument(&arguments, 0, "a message", MAX_TEXT)?;
        context
            .send_group(
                &member.room,
                &[],
                "newMessage",
                &[json!(member.name), json!(text)],
            )
            .map_err(send_failed)?;
        Ok(None)
    }

    /// Asks every other member of the caller's room, at once, and waits for their answers.
    async fn poll(
        &self,
        context: HubContext,
        caller: Caller,
        arguments: Vec<Value>,
    ) -> MethodResult {
        let asker = self.member(&caller.connection_id)?;
        let question = text_argument(&arguments, 0, "a question", MAX_TEXT)?;
        let others: Vec<_> = self
            .room_members(&asker.room)
            .into_iter()
            .filter(|(id, _)| *id != caller.connection_id)
            .collect();
        let asks = others.iter().map(|(id, member)| {
            let context = context.clone();
            let arguments = [json!(question), json!(asker.name)];
            async move {
                let answer = tokio::time::timeout(
                    POLL_ANSWER_TIMEOUT,
                    context.invoke_client(id, "answerPoll", &arguments),
                )
                .await;
                let answer = match answer {
                    Ok(Ok(Value::String(text))) => text,
                    Ok(Ok(other)) => other.to_string(),
                    Ok(Err(_)) | Err(_) => "no answer".to_owned(),
                };
                (member.name.clone(), json!(answer))
            }
        });
        let answers: serde_json::Map<String, Value> = join_all(asks).await.into_iter().collect();
        let answers = Value::Object(answers);
        context
            .send_group(
                &asker.room,
                &[],
                "pollResult",
                &[json!(question), answers.clone()],
            )
            .map_err(send_failed)?;
        Ok(Some(answers))
    }

    async fn leave(&self, context: HubContext, connection_id: String) -> MethodResult {
        let removed = self.members.lock().remove(&connection_id);
        if let Some(member) = removed {
            // The service drops a closed connection's groups itself; a member who leaves and
            // stays connected must not hear the room any more.
            let _ = context
                .remove_from_group(&connection_id, Some(&member.room))
                .await;
            let notice = format!("{} left", member.name);
            context
                .send_group(&member.room, &[], "notice", &[json!(notice)])
                .map_err(send_failed)?;
        }
        Ok(None)
    }

    /// Members whose connection is gone without a `Leave` (a closed tab, a lost network): the
    /// SDK's hub has no disconnect callback, so the app asks the service which connections
    /// still exist, and tells their rooms.
    pub async fn sweep(&self, context: HubContext) {
        let ids: Vec<String> = self.members.lock().keys().cloned().collect();
        for id in ids {
            if let Ok(false) = context.connection_exists(&id).await {
                let _ = self.leave(context.clone(), id).await;
            }
        }
    }
}

/// The hub, as the app server calls it (`Arc` so that invocations can outlive the call).
pub struct ChatMethods(pub Arc<ChatHub>);

impl HubMethods for ChatMethods {
    fn invoke(
        &self,
        context: HubContext,
        caller: Caller,
        method: String,
        arguments: Vec<Value>,
        _streams: Vec<ClientStream>,
    ) -> BoxFuture<'static, MethodResult> {
        let hub = self.0.clone();
        Box::pin(async move {
            match method.as_str() {
                "Join" => hub.join(context, caller, arguments).await,
                "Send" => hub.say(context, caller, arguments),
                "Poll" => hub.poll(context, caller, arguments).await,
                "Leave" => hub.leave(context, caller.connection_id).await,
                other => Err(format!("Unknown hub method '{other}'")),
            }
        })
    }
}
