//! One Redis connection per attached node: its subscriptions, and the reader that applies what
//! arrives. Subscribe and unsubscribe commands go through one ordered queue, so a channel's
//! subscribe and unsubscribe never overtake each other; a barrier answers once every command
//! before it is live in Redis.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use redis::aio::ConnectionManagerConfig;
use redis::{PushInfo, PushKind, Value};
use switchyard_backplane::envelope;
use switchyard_backplane::{NodeId, Sink};
use tokio::sync::{mpsc, oneshot};

use crate::shared::{count, Shared};

pub(crate) enum Command {
    Subscribe(String),
    Unsubscribe(String),
    Barrier(oneshot::Sender<()>),
}

/// Subscribes or unsubscribes at most this many channels per Redis command.
const MAX_BATCH: usize = 512;

pub(crate) async fn run(
    shared: Arc<Shared>,
    node: NodeId,
    sink: Weak<dyn Sink>,
    live: Arc<AtomicBool>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let reader = Reader {
        shared: shared.clone(),
        sink,
        live,
        last_seq: Mutex::new(HashMap::new()),
    };
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(shared.settings.response_timeout))
        .set_connection_timeout(Some(shared.settings.response_timeout))
        .set_automatic_resubscription()
        .set_push_sender(move |push: PushInfo| {
            reader.push(push);
            Ok::<(), ()>(())
        });
    let mut connection = loop {
        match shared
            .client
            .get_connection_manager_with_config(config.clone())
            .await
        {
            Ok(connection) => break connection,
            Err(error) => {
                tracing::warn!(%node, %error, "redis subscriber cannot connect; retrying");
                count(&shared.stats.subscribe_errors);
                tokio::time::sleep(Duration::from_secs(1)).await;
                if commands.is_closed() {
                    return;
                }
            }
        }
    };
    let mut pending: Vec<Command> = Vec::new();
    loop {
        if pending.is_empty() && commands.recv_many(&mut pending, MAX_BATCH).await == 0 {
            return; // detached
        }
        // Take the leading run of one kind and send it as one command.
        let mut names = Vec::new();
        let subscribe = match pending.first() {
            Some(Command::Barrier(_)) => {
                if let Command::Barrier(done) = pending.remove(0) {
                    let _ = done.send(());
                }
                continue;
            }
            Some(Command::Subscribe(_)) => true,
            _ => false,
        };
        let run = pending
            .iter()
            .take_while(|c| match c {
                Command::Subscribe(_) => subscribe,
                Command::Unsubscribe(_) => !subscribe,
                Command::Barrier(_) => false,
            })
            .count();
        for command in pending.drain(..run) {
            if let Command::Subscribe(name) | Command::Unsubscribe(name) = command {
                names.push(name);
            }
        }
        let mut delay = Duration::from_millis(50);
        loop {
            let result = if subscribe {
                connection.subscribe(&names).await
            } else {
                connection.unsubscribe(&names).await
            };
            match result {
                Ok(()) => break,
                Err(error) => {
                    tracing::warn!(%node, %error, "redis subscribe failed; retrying");
                    count(&shared.stats.subscribe_errors);
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(2));
                    if commands.is_closed() {
                        return;
                    }
                }
            }
        }
    }
}

/// Applies pushes as they are read; never blocks the connection (the sink only queues).
struct Reader {
    shared: Arc<Shared>,
    sink: Weak<dyn Sink>,
    live: Arc<AtomicBool>,
    /// The last sequence number seen per publisher: copies of one envelope published on
    /// several channels arrive one after another.
    last_seq: Mutex<HashMap<u64, u64>>,
}

impl Reader {
    fn push(&self, push: PushInfo) {
        if push.kind != PushKind::Message || !self.live.load(Ordering::Acquire) {
            return;
        }
        let Some(Value::BulkString(data)) = push.data.into_iter().nth(1) else {
            count(&self.shared.stats.decode_errors);
            return;
        };
        let bytes = Bytes::from(data);
        let (stamp, message) = match envelope::decode(&bytes) {
            Ok(decoded) => decoded,
            Err(error) => {
                tracing::warn!(%error, "dropping a backplane message that does not decode");
                count(&self.shared.stats.decode_errors);
                return;
            }
        };
        let ask = matches!(message, switchyard_core::Message::Ask { .. });
        if stamp.origin == self.shared.origin && !ask {
            return; // delivered locally when it was published
        }
        if self.last_seq.lock().insert(stamp.origin, stamp.seq) == Some(stamp.seq) {
            return; // another channel's copy of the same message
        }
        count(&self.shared.stats.received);
        if let Some(sink) = self.sink.upgrade() {
            sink.receive(&Arc::new(message));
        }
    }
}
