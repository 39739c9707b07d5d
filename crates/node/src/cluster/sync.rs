//! The user-group table every node keeps whole, copied from the others: once before a node
//! serves, and again after an outage of its backplane (changes it could not hear meanwhile).

use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_core::{user_group_key, Channel, UserGroupEntry, UserGroupKey};

use super::control::node_wide_hub;
use super::question::{Answer, Question};
use super::{Cluster, Gathered};

/// Where the user-group re-sync after an outage stands (see [`Cluster::resync_tick`]).
#[derive(Default)]
pub(super) struct Resync {
    /// Joins and leaves made here are being noted.
    noting: bool,
    /// Counts the ticks that found the backplane failing.
    outage: u64,
    /// When the copy may start (the backplane answers again).
    due: Option<Instant>,
    running: bool,
    /// The backplane's count of lost publishes at the last tick.
    publish_errors: u64,
}

impl Cluster {
    /// Copies the user-group memberships from the nodes already running (each keeps the
    /// whole table), page by page; returns how many it took on. Called once, before the node
    /// serves: changes made from then on reach it as they happen, and win over the copy.
    pub async fn copy_user_groups(&self) -> usize {
        if !self.in_cluster() {
            return 0;
        }
        self.router.begin_copy();
        if !self.settle_within_timeout().await {
            tracing::warn!("the backplane did not confirm this node's subscriptions in time");
        }
        let copied = self.copy_user_group_pages().await;
        self.router.end_copy();
        copied
    }

    /// The user-group re-sync after an outage, once a second. While the backplane fails (the
    /// probe, or any publish it did not take) this node notes the joins and leaves it makes
    /// (the router keeps them, so the copy does not undo them); once it answers again, the
    /// node waits `node_timeout` for the others to be back too, then copies their tables
    /// (what it noted wins: a union, so leaves made on another node during the outage are
    /// not learnt; see docs/cluster.md, "Failures"). A new outage during the copy keeps the
    /// notes for the next copy.
    pub(crate) fn resync_tick(
        self: &Arc<Self>,
        healthy: bool,
        now: Instant,
        node_timeout: Duration,
    ) {
        let errors = self.backplane_traffic().publish_errors;
        let mut resync = self.resync.lock();
        let failing = !healthy || errors > resync.publish_errors;
        resync.publish_errors = errors;
        if failing {
            if !resync.noting {
                self.router.begin_copy();
                resync.noting = true;
            }
            resync.outage += 1;
            resync.due = None;
            return;
        }
        if !resync.noting || resync.running {
            return;
        }
        let due = *resync.due.get_or_insert(now + node_timeout);
        if now < due {
            return;
        }
        resync.due = None;
        resync.running = true;
        let outage = resync.outage;
        let cluster = self.clone();
        tokio::spawn(async move {
            let copied = cluster.copy_user_group_pages().await;
            let mut resync = cluster.resync.lock();
            resync.running = false;
            if resync.outage == outage {
                cluster.router.end_copy();
                resync.noting = false;
                tracing::info!(
                    copied,
                    "user-group memberships taken on from the other nodes after the outage"
                );
            }
        });
    }

    async fn copy_user_group_pages(&self) -> usize {
        let mut after: Option<UserGroupKey> = None;
        let mut copied = 0;
        loop {
            let gathered = self.list_user_groups(after.clone()).await;
            let (mut page, more) = merge_pages(gathered.answers, after.as_ref());
            self.router.restore_user_groups(&page);
            copied += page.len();
            match page.pop() {
                Some(last) if more => after = Some((last.hub, last.user, last.group)),
                _ => break,
            }
        }
        copied
    }

    /// Every node's next page of user groups after `after`, asked up to three times until
    /// every node answered.
    async fn list_user_groups(&self, after: Option<UserGroupKey>) -> Gathered {
        const TRIES: usize = 3;
        let mut gathered = Gathered::default();
        for _ in 0..TRIES {
            let question = Question::UserGroups {
                after: after.clone(),
                max: PAGE,
            };
            gathered = self
                .ask(&node_wide_hub(), Channel::All, question, |_| false)
                .await;
            if gathered.complete {
                return gathered;
            }
        }
        tracing::warn!("not every node listed its user groups in time; the copy may miss some");
        gathered
    }
}

/// Memberships one answer lists at most.
const PAGE: u32 = 1000;

/// The first page of the union of the nodes' pages (entries after `after`, ordered), and
/// whether there may be more.
fn merge_pages(answers: Vec<Answer>, after: Option<&UserGroupKey>) -> (Vec<UserGroupEntry>, bool) {
    let floor = after.map(user_group_key);
    let mut more = false;
    let mut page: Vec<UserGroupEntry> = Vec::new();
    for answer in answers {
        if let Answer::UserGroups(entries) = answer {
            more |= entries.len() >= PAGE as usize;
            page.extend(
                entries
                    .into_iter()
                    .filter(|e| floor.is_none_or(|f| e.key() > f)),
            );
        }
    }
    page.sort_unstable_by(|a, b| a.key().cmp(&b.key()));
    // Of entries listed twice, the longer-lived is kept (no ttl sorts last).
    page.dedup_by(|later, earlier| {
        let same = later.key() == earlier.key();
        if same && (later.ttl.is_none() || earlier.ttl.is_some_and(|t| Some(t) < later.ttl)) {
            earlier.ttl = later.ttl;
        }
        same
    });
    more |= page.len() > PAGE as usize;
    page.truncate(PAGE as usize);
    (page, more)
}
