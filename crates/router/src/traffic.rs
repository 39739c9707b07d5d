//! Hub-message traffic counters, in Azure SignalR Service's terms: messages and bytes in
//! (from clients) and out (to clients), and the same messages in Azure's 2 KB billing units.

use std::sync::atomic::{AtomicU64, Ordering};

/// Azure counts a message as one unit per started 2 KB ("messages larger than 2 KB are
/// counted as multiple messages of 2 KB each").
pub const BILLING_UNIT_BYTES: usize = 2048;

/// Billing units of one message of `bytes` bytes: `ceil(bytes / 2048)`, at least 1.
#[inline]
pub fn billing_units(bytes: usize) -> u64 {
    bytes.div_ceil(BILLING_UNIT_BYTES).max(1) as u64
}

/// Running totals, updated with relaxed atomics (readers want totals, not ordering).
#[derive(Debug, Default)]
pub struct Traffic {
    pub messages_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub messages_out: AtomicU64,
    pub bytes_out: AtomicU64,
    pub units_in: AtomicU64,
    pub units_out: AtomicU64,
}

/// A copy of a [`Traffic`]'s totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficTotals {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub messages_out: u64,
    pub bytes_out: u64,
    pub units_in: u64,
    pub units_out: u64,
}

impl Traffic {
    /// Adds messages received; `totals`' outbound fields are ignored.
    #[inline]
    pub fn record_in(&self, totals: &TrafficTotals) {
        if totals.messages_in == 0 {
            return;
        }
        self.messages_in
            .fetch_add(totals.messages_in, Ordering::Relaxed);
        self.bytes_in.fetch_add(totals.bytes_in, Ordering::Relaxed);
        self.units_in.fetch_add(totals.units_in, Ordering::Relaxed);
    }

    /// Adds messages delivered; `totals`' inbound fields are ignored.
    #[inline]
    pub fn record_out(&self, totals: &TrafficTotals) {
        if totals.messages_out == 0 {
            return;
        }
        self.messages_out
            .fetch_add(totals.messages_out, Ordering::Relaxed);
        self.bytes_out
            .fetch_add(totals.bytes_out, Ordering::Relaxed);
        self.units_out
            .fetch_add(totals.units_out, Ordering::Relaxed);
    }

    /// Adds one message of `bytes` received.
    #[inline]
    pub fn message_in(&self, bytes: usize) {
        self.record_in(&TrafficTotals::default().with_in(bytes));
    }

    /// Adds one message of `bytes` delivered.
    #[inline]
    pub fn message_out(&self, bytes: usize) {
        self.record_out(&TrafficTotals::default().with_out(bytes));
    }

    pub fn snapshot(&self) -> TrafficTotals {
        TrafficTotals {
            messages_in: self.messages_in.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            messages_out: self.messages_out.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            units_in: self.units_in.load(Ordering::Relaxed),
            units_out: self.units_out.load(Ordering::Relaxed),
        }
    }
}

impl TrafficTotals {
    /// Counts one more message of `bytes` received (to record many with one atomic add each).
    #[inline]
    pub fn add_in(&mut self, bytes: usize) {
        self.messages_in += 1;
        self.bytes_in += bytes as u64;
        self.units_in += billing_units(bytes);
    }

    /// Counts one more message of `bytes` delivered.
    #[inline]
    pub fn add_out(&mut self, bytes: usize) {
        self.messages_out += 1;
        self.bytes_out += bytes as u64;
        self.units_out += billing_units(bytes);
    }

    #[inline]
    fn with_in(mut self, bytes: usize) -> Self {
        self.add_in(bytes);
        self
    }

    #[inline]
    fn with_out(mut self, bytes: usize) -> Self {
        self.add_out(bytes);
        self
    }
}

impl std::ops::AddAssign for TrafficTotals {
    fn add_assign(&mut self, other: TrafficTotals) {
        self.messages_in += other.messages_in;
        self.bytes_in += other.bytes_in;
        self.messages_out += other.messages_out;
        self.bytes_out += other.bytes_out;
        self.units_in += other.units_in;
        self.units_out += other.units_out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_started_2kb_chunks_at_least_one() {
        assert_eq!(billing_units(0), 1);
        assert_eq!(billing_units(1), 1);
        assert_eq!(billing_units(2048), 1);
        assert_eq!(billing_units(2049), 2);
        assert_eq!(billing_units(4096), 2);
        assert_eq!(billing_units(4097), 3);
    }

    #[test]
    fn records_and_snapshots() {
        let traffic = Traffic::default();
        traffic.message_in(10);
        traffic.message_out(3000);
        let mut batch = TrafficTotals::default();
        batch.add_out(100);
        batch.add_out(5000);
        traffic.record_out(&batch);
        assert_eq!(
            traffic.snapshot(),
            TrafficTotals {
                messages_in: 1,
                bytes_in: 10,
                units_in: 1,
                messages_out: 3,
                bytes_out: 8100,
                units_out: 2 + 1 + 3,
            }
        );
    }
}
