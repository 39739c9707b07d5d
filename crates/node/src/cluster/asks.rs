//! Questions this node asked other nodes, waiting for their answers.
//!
//! An ask is published on one channel; the backplane's receipt says how many nodes it reached
//! (the asker too, when it listens there), and each of them answers once on the asker's node
//! channel. The ask is complete when that many answers arrived, or earlier when one answer
//! settles it (a connection's owner said yes); after the timeout, whatever arrived is the
//! answer and the ask counts as incomplete.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::question::Answer;
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// What an ask gathered.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    pub(crate) answers: Vec<Answer>,
    /// Every node the ask reached answered (or one answer settled it).
    pub(crate) complete: bool,
}

pub(crate) struct Asks {
    /// Starts at a random value: answers go to a node's inbox, and two nodes that were
    /// (wrongly) given one id must not take each other's answers for their own.
    next: AtomicU64,
    pending: Mutex<HashMap<u64, Pending>>,
}

impl Default for Asks {
    fn default() -> Self {
        use std::hash::BuildHasher;
        let start = std::collections::hash_map::RandomState::new().hash_one(0u8);
        Asks {
            next: AtomicU64::new(start),
            pending: Mutex::default(),
        }
    }
}

struct Pending {
    answers: Vec<Answer>,
    expected: Option<usize>,
    settles: fn(&Answer) -> bool,
    done: Option<oneshot::Sender<()>>,
}

impl Pending {
    fn finished(&self) -> bool {
        self.answers.last().is_some_and(self.settles)
            || self.expected.is_some_and(|n| self.answers.len() >= n)
    }
}

/// An ask in flight; dropping it forgets the ask.
pub(crate) struct Waiting<'a> {
    asks: &'a Asks,
    id: u64,
    done: Option<oneshot::Receiver<()>>,
}

impl Asks {
    /// Registers an ask before it is published (answers may arrive before the receipt).
    /// `settles` says whether one answer decides it.
    pub(crate) fn start(&self, settles: fn(&Answer) -> bool) -> Waiting<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().insert(
            id,
            Pending {
                answers: Vec::new(),
                expected: None,
                settles,
                done: Some(tx),
            },
        );
        Waiting {
            asks: self,
            id,
            done: Some(rx),
        }
    }

    /// An answer from a node (late or unknown ones are ignored).
    pub(crate) fn answered(&self, id: u64, answer: Answer) {
        let mut pending = self.pending.lock();
        if let Some(ask) = pending.get_mut(&id) {
            if ask.finished() {
                return;
            }
            ask.answers.push(answer);
            if ask.finished() {
                if let Some(done) = ask.done.take() {
                    let _ = done.send(());
                }
            }
        }
    }

    fn expect(&self, id: u64, reached: usize) {
        let mut pending = self.pending.lock();
        if let Some(ask) = pending.get_mut(&id) {
            ask.expected = Some(reached);
            if ask.finished() {
                if let Some(done) = ask.done.take() {
                    let _ = done.send(());
                }
            }
        }
    }

    /// Asks in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.lock().len()
    }
}

impl Waiting<'_> {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Waits for the answers, given how many nodes the ask reached (`None`: it was not
    /// published, so nobody will answer).
    pub(crate) async fn gather(mut self, reached: Option<usize>, timeout: Duration) -> Gathered {
        let Some(reached) = reached else {
            return self.take(false);
        };
        self.asks.expect(self.id, reached);
        let mut done = self.done.take().expect("gathered once");
        // Answered already (one node, or answers that came before the receipt): no timer.
        let complete = done.try_recv().is_ok() || tokio::time::timeout(timeout, done).await.is_ok();
        self.take(complete)
    }

    fn take(&mut self, complete: bool) -> Gathered {
        let answers = self
            .asks
            .pending
            .lock()
            .remove(&self.id)
            .map(|p| p.answers)
            .unwrap_or_default();
        Gathered { answers, complete }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.asks.pending.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yes(answer: &Answer) -> bool {
        *answer == Answer::Yes
    }

    fn never(_: &Answer) -> bool {
        false
    }

    #[tokio::test]
    async fn complete_when_every_node_answered_even_before_the_receipt() {
        let asks = Asks::default();
        let waiting = asks.start(never);
        asks.answered(waiting.id(), Answer::No);
        asks.answered(waiting.id(), Answer::No);
        let got = waiting.gather(Some(2), Duration::from_secs(5)).await;
        assert!(got.complete);
        assert_eq!(got.answers, vec![Answer::No, Answer::No]);
        assert_eq!(asks.in_flight(), 0);
    }

    #[tokio::test]
    async fn one_settling_answer_is_enough() {
        let asks = Asks::default();
        let waiting = asks.start(yes);
        let id = waiting.id();
        asks.answered(id, Answer::Yes);
        asks.answered(id, Answer::No);
        let got = waiting.gather(Some(3), Duration::from_secs(5)).await;
        assert!(got.complete);
        assert_eq!(got.answers, vec![Answer::Yes]);
    }

    #[tokio::test]
    async fn missing_answers_time_out_incomplete() {
        let asks = Asks::default();
        let waiting = asks.start(never);
        asks.answered(waiting.id(), Answer::No);
        let got = waiting.gather(Some(2), Duration::from_millis(20)).await;
        assert!(!got.complete);
        assert_eq!(got.answers, vec![Answer::No]);
        assert_eq!(asks.in_flight(), 0);
    }

    #[tokio::test]
    async fn an_ask_nobody_heard_is_complete_at_once_and_an_unpublished_one_is_not() {
        let asks = Asks::default();
        let got = asks
            .start(never)
            .gather(Some(0), Duration::from_secs(5))
            .await;
        assert!(got.complete && got.answers.is_empty());
        let got = asks.start(never).gather(None, Duration::from_secs(5)).await;
        assert!(!got.complete);
        drop(asks.start(never));
        assert_eq!(asks.in_flight(), 0);
    }
}
