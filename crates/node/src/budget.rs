//! Allowances shared node-wide: many holders draw on one limit and each gives back what it
//! holds when it ends, through a guard, so no path can forget to.
//!
//! - [`ByteBudget`] / [`Charge`]: bytes held (app servers' half-received messages).
//! - [`Slots`] / [`Slot`]: things counted in all and per key (app-server connections, in all
//!   and per hub).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus_client::metrics::gauge::Gauge;

/// Bytes that many holders may hold together, at most `max`.
pub(crate) struct ByteBudget {
    max: usize,
    used: AtomicUsize,
    gauge: Gauge,
}

impl ByteBudget {
    pub(crate) fn new(max: usize, gauge: Gauge) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            max,
            used: AtomicUsize::new(0),
            gauge,
        })
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// A holder with nothing held yet.
    pub(crate) fn charge(self: &Arc<Self>) -> Charge {
        Charge {
            budget: self.clone(),
            held: 0,
        }
    }
}

/// One holder's share of a [`ByteBudget`], given back when dropped.
pub(crate) struct Charge {
    budget: Arc<ByteBudget>,
    held: usize,
}

impl Charge {
    /// Holds `bytes` from now on instead of what it held. Growing past the budget fails and
    /// leaves the share as it was.
    pub(crate) fn resize(&mut self, bytes: usize) -> bool {
        let budget = &self.budget;
        if bytes > self.held {
            let more = bytes - self.held;
            let grown = budget
                .used
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                    used.checked_add(more).filter(|total| *total <= budget.max)
                });
            if grown.is_err() {
                return false;
            }
            budget.gauge.inc_by(more as i64);
        } else {
            let less = self.held - bytes;
            budget.used.fetch_sub(less, Ordering::AcqRel);
            budget.gauge.dec_by(less as i64);
        }
        self.held = bytes;
        true
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.resize(0);
    }
}

/// Why a [`Slots::take`] failed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Full {
    /// Every slot is taken.
    All(usize),
    /// Every slot of this key is taken.
    Key(usize),
}

/// Counted things, at most `max` in all and `per_key` per key (0 = unlimited).
pub(crate) struct Slots<K: Hash + Eq + Clone> {
    max: usize,
    per_key: usize,
    taken: Mutex<(usize, HashMap<K, usize>)>,
}

impl<K: Hash + Eq + Clone> Slots<K> {
    pub(crate) fn new(max: usize, per_key: usize) -> Arc<Slots<K>> {
        Arc::new(Slots {
            max,
            per_key,
            taken: Mutex::new((0, HashMap::new())),
        })
    }

    /// Takes a slot for `key`, given back when the returned guard drops.
    pub(crate) fn take(self: &Arc<Self>, key: &K) -> Result<Slot<K>, Full> {
        let mut taken = self.taken.lock();
        let (all, by_key) = &mut *taken;
        if self.max != 0 && *all >= self.max {
            return Err(Full::All(self.max));
        }
        let of_key = by_key.get(key).copied().unwrap_or(0);
        if self.per_key != 0 && of_key >= self.per_key {
            return Err(Full::Key(self.per_key));
        }
        *all += 1;
        by_key.insert(key.clone(), of_key + 1);
        Ok(Slot {
            slots: self.clone(),
            key: key.clone(),
        })
    }
}

/// A slot taken from [`Slots`].
pub(crate) struct Slot<K: Hash + Eq + Clone> {
    slots: Arc<Slots<K>>,
    key: K,
}

impl<K: Hash + Eq + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut taken = self.slots.taken.lock();
        let (all, by_key) = &mut *taken;
        *all -= 1;
        if let Some(count) = by_key.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                by_key.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_share_the_budget_and_give_back_on_drop() {
        let gauge = Gauge::default();
        let budget = ByteBudget::new(100, gauge.clone());
        let mut a = budget.charge();
        let mut b = budget.charge();
        assert!(a.resize(60));
        assert!(!b.resize(50), "60 + 50 is over 100");
        assert!(b.resize(40));
        assert_eq!((budget.used(), gauge.get()), (100, 100));
        assert!(a.resize(10), "shrinking always works");
        assert!(b.resize(90));
        drop(b);
        assert_eq!((budget.used(), gauge.get()), (10, 10));
        drop(a);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn slots_count_in_all_and_per_key() {
        let slots = Slots::new(3, 2);
        let a1 = slots.take(&"a").unwrap();
        let _a2 = slots.take(&"a").unwrap();
        assert_eq!(slots.take(&"a").err(), Some(Full::Key(2)));
        let _b1 = slots.take(&"b").unwrap();
        assert_eq!(slots.take(&"c").err(), Some(Full::All(3)));
        drop(a1);
        assert!(slots.take(&"a").is_ok());
        let unlimited = Slots::new(0, 0);
        let held: Vec<_> = (0..1000).map(|_| unlimited.take(&1).unwrap()).collect();
        assert_eq!(held.len(), 1000);
    }
}
