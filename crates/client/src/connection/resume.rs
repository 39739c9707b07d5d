//! Stateful reconnect's I/O (its numbering and buffer are in `stateful`): a dropped socket
//! given up, a new one opened within the window and the unacknowledged frames replayed,
//! and the Ack written when it is due.

use tokio::time::Instant;

use super::io::{write, Io};
use super::reassemble::Reassembler;
use super::{stateful, websocket, Connection};
use crate::ClientError;

impl Connection {
    /// Under stateful reconnect, a read or write failed without a close: the socket is
    /// given up and the next [`Connection::restore`] opens another. Otherwise (or once
    /// reconnecting has failed for good) the error is the caller's.
    pub(super) fn transport_failed(&mut self, error: ClientError) -> Result<(), ClientError> {
        match self.stateful.as_deref_mut() {
            Some(state) if state.failed.is_none() => {
                tracing::debug!(connection = %self.connection_id, %error, "stateful reconnect: transport dropped");
                self.io = Io::Gone;
                state.dropped();
                Ok(())
            }
            _ => Err(error),
        }
    }

    /// Stateful reconnect: opens a new socket if the last one dropped (retrying within the
    /// window), then writes this client's Sequence and its unacknowledged frames.
    pub(super) async fn restore(&mut self) -> Result<(), ClientError> {
        loop {
            let Some(state) = self.stateful.as_deref_mut() else {
                return Ok(());
            };
            if let Some(why) = &state.failed {
                return Err(ClientError::Protocol(why.clone()));
            }
            if let Some(dropped_at) = state.dropped_at {
                let deadline = dropped_at + state.window;
                if state.attempts > 0 {
                    tokio::time::sleep_until(
                        (Instant::now() + stateful::RETRY_DELAY).min(deadline),
                    )
                    .await;
                }
                let opened = tokio::time::timeout_at(
                    deadline,
                    websocket::open(
                        &state.target,
                        state.token.as_deref(),
                        state.local_address,
                        state.max_message_size,
                        &state.tls_roots,
                    ),
                )
                .await;
                match opened {
                    Ok(Ok(socket)) => {
                        self.io = Io::Ws(socket);
                        // A message cut off with the old socket is replayed whole.
                        self.frames = Reassembler::new(self.format, state.max_message_size);
                        state.reopened();
                    }
                    // The server answered but would not take the socket (404: the
                    // connection is gone): no point trying again.
                    Ok(Err(ClientError::WebSocket(
                        tokio_tungstenite::tungstenite::Error::Http(response),
                    ))) => {
                        let why = format!(
                            "stateful reconnect refused: HTTP {}",
                            response.status().as_u16()
                        );
                        state.failed = Some(why.clone());
                        return Err(ClientError::Protocol(why));
                    }
                    Ok(Err(e)) if Instant::now() < deadline => {
                        tracing::debug!(connection = %self.connection_id, error = %e, "stateful reconnect: attempt failed");
                        state.attempts += 1;
                        continue;
                    }
                    Ok(Err(_)) | Err(_) => {
                        let why = format!(
                            "stateful reconnect: no new socket within {} s",
                            state.window.as_secs_f64()
                        );
                        state.failed = Some(why.clone());
                        return Err(ClientError::Protocol(why));
                    }
                }
            }
            if !state.replay_pending {
                return Ok(());
            }
            let frames = state.replay(self.format);
            let replayed = frames.len() as u64 - 1;
            let mut written = Ok(());
            for frame in frames {
                written = write(&mut self.io, self.format, frame).await;
                if written.is_err() {
                    break;
                }
            }
            let state = self.stateful.as_deref_mut().expect("stateful");
            match written {
                Ok(()) => {
                    state.replay_pending = false;
                    state.stats.replayed += replayed;
                    return Ok(());
                }
                Err(e) => self.transport_failed(e)?,
            }
        }
    }

    /// Writes the owed Ack if its time has come.
    pub(super) async fn write_due_ack(&mut self) -> Result<(), ClientError> {
        let Some(state) = self.stateful.as_deref_mut() else {
            return Ok(());
        };
        if !state.ack_is_due(Instant::now()) {
            return Ok(());
        }
        let Some((id, frame)) = state.ack(self.format) else {
            state.ack_settled();
            return Ok(());
        };
        write(&mut self.io, self.format, frame).await?;
        if let Some(state) = self.stateful.as_deref_mut() {
            state.acked(id);
        }
        Ok(())
    }
}
