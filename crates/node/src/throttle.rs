//! Throttling (the `[throttling]` settings): how fast new client connections and REST calls
//! may come, and how much negotiating and handshaking may be in progress at once.
//!
//! Rates are token buckets in GCRA form: one number per bucket, the moment it will be full
//! again. A bucket that is full holds nothing worth keeping, so the per-address table drops
//! those, and it never holds more than [`MAX_TRACKED_ADDRESSES`] (IPv6 addresses count per
//! /64, the block one host usually has): an attacker with many addresses cannot grow it.
//! (A crate such as `governor` was not taken: its keyed limiter's table has no cap on its
//! entries, and it brings half a dozen crates for what is a subtraction and a comparison.)

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use switchyard_auth::SigningKey;

use crate::config::{canonical_ip, Throttling};
use crate::metrics::{KindLabel, Metrics};

/// Source addresses whose connect buckets are kept at most (about 40 bytes each).
pub(crate) const MAX_TRACKED_ADDRESSES: usize = 100_000;
/// A full table is swept of full buckets at most this often when a new address comes;
/// in between, new addresses are refused (it is full of addresses connecting right now).
const SWEEP_INTERVAL: Duration = Duration::from_millis(100);
/// What a refusal for work in progress tells the client to wait: such work ends in moments.
const BUSY_RETRY_AFTER_SECS: u64 = 1;

/// A rate: a token every `interval_ns`, at most `capacity_ns / interval_ns` at once.
#[derive(Clone, Copy, Debug)]
struct Rate {
    interval_ns: u64,
    capacity_ns: u64,
}

impl Rate {
    /// `None` when off (a rate of 0). A burst of 0 is the rate (one second's worth).
    fn new(per_second: u32, burst: u32) -> Option<Rate> {
        if per_second == 0 {
            return None;
        }
        let burst = if burst == 0 { per_second } else { burst };
        let interval_ns = 1_000_000_000 / u64::from(per_second);
        Some(Rate {
            interval_ns,
            capacity_ns: interval_ns * u64::from(burst),
        })
    }
}

/// One token bucket: when it will be full again, in nanoseconds of the throttle's clock.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    full_at_ns: u64,
}

impl Bucket {
    /// Takes a token, or says how long until one is there.
    fn take(&mut self, rate: Rate, now_ns: u64) -> Result<(), Duration> {
        let next = self.full_at_ns.max(now_ns) + rate.interval_ns;
        let debt = next - now_ns;
        if debt > rate.capacity_ns {
            return Err(Duration::from_nanos(debt - rate.capacity_ns));
        }
        self.full_at_ns = next;
        Ok(())
    }

    fn is_full(&self, now_ns: u64) -> bool {
        self.full_at_ns <= now_ns
    }
}

/// Connect buckets by source address, within [`MAX_TRACKED_ADDRESSES`].
struct AddressBuckets {
    rate: Rate,
    capacity: usize,
    table: Mutex<AddressTable>,
}

struct AddressTable {
    buckets: HashMap<IpAddr, Bucket>,
    swept_ns: u64,
}

impl AddressBuckets {
    fn new(rate: Rate, capacity: usize) -> AddressBuckets {
        AddressBuckets {
            rate,
            capacity,
            table: Mutex::new(AddressTable {
                buckets: HashMap::new(),
                swept_ns: 0,
            }),
        }
    }

    fn take(&self, address: IpAddr, now_ns: u64) -> Result<(), Duration> {
        let key = address_key(address);
        let mut table = self.table.lock();
        if !table.buckets.contains_key(&key) && table.buckets.len() >= self.capacity {
            // Full of addresses that connected within the last burst's time. Sweeping is a
            // pass over the table, so it is not done for every newcomer.
            if now_ns.saturating_sub(table.swept_ns) < SWEEP_INTERVAL.as_nanos() as u64 {
                return Err(Duration::from_nanos(self.rate.interval_ns));
            }
            table.swept_ns = now_ns;
            table.buckets.retain(|_, bucket| !bucket.is_full(now_ns));
            if table.buckets.len() >= self.capacity {
                return Err(Duration::from_nanos(self.rate.interval_ns));
            }
        }
        table
            .buckets
            .entry(key)
            .or_default()
            .take(self.rate, now_ns)
    }

    /// Drops full buckets (they are as good as new ones).
    fn sweep(&self, now_ns: u64) {
        let mut table = self.table.lock();
        table.swept_ns = now_ns;
        table.buckets.retain(|_, bucket| !bucket.is_full(now_ns));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().buckets.len()
    }
}

/// The address a bucket is kept for: IPv4 as it is, IPv6 by its /64.
fn address_key(address: IpAddr) -> IpAddr {
    match canonical_ip(address) {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// Why a request was throttled; each is a `kind` of `switchyard_throttled_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Throttled {
    /// `throttling.connect_rate`.
    ConnectNode,
    /// `throttling.connect_rate_per_address`.
    ConnectAddress,
    /// `throttling.rest_rate_per_key`.
    Rest,
    /// `throttling.max_negotiations_in_progress`.
    Negotiations,
    /// `throttling.max_handshakes_in_progress`.
    Handshakes,
}

impl Throttled {
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Throttled::ConnectNode => "connect_node",
            Throttled::ConnectAddress => "connect_address",
            Throttled::Rest => "rest",
            Throttled::Negotiations => "negotiations",
            Throttled::Handshakes => "handshakes",
        }
    }

    /// What the refused peer is told (without the wait).
    pub(crate) fn message(self) -> &'static str {
        match self {
            Throttled::ConnectNode => {
                "too many new connections to this service right now (throttling.connect_rate)"
            }
            Throttled::ConnectAddress => {
                "too many new connections from your address right now \
                 (throttling.connect_rate_per_address)"
            }
            Throttled::Rest => {
                "too many REST requests signed with this access key right now \
                 (throttling.rest_rate_per_key)"
            }
            Throttled::Negotiations => {
                "the service is answering too many negotiate requests at once \
                 (throttling.max_negotiations_in_progress)"
            }
            Throttled::Handshakes => {
                "too many client connections are waiting for their handshake \
                 (throttling.max_handshakes_in_progress)"
            }
        }
    }

    /// Rates are the caller's doing (429); work in progress is the service's state (503).
    pub(crate) fn is_rate(self) -> bool {
        matches!(
            self,
            Throttled::ConnectNode | Throttled::ConnectAddress | Throttled::Rest
        )
    }
}

/// A refusal: why, and the whole seconds to wait (`Retry-After`, at least 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) why: Throttled,
    pub(crate) retry_after_secs: u64,
}

impl Refusal {
    fn after(why: Throttled, wait: Duration) -> Refusal {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        Refusal {
            why,
            retry_after_secs: secs.max(1),
        }
    }
}

/// A count of work in progress under a bound (0 = none).
struct InProgress {
    bound: usize,
    count: AtomicUsize,
}

impl InProgress {
    fn new(bound: usize) -> InProgress {
        InProgress {
            bound,
            count: AtomicUsize::new(0),
        }
    }

    fn try_begin(&self) -> bool {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (self.bound == 0 || n < self.bound).then_some(n + 1)
            })
            .is_ok()
    }

    fn end(&self) {
        let _ = self
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

/// A negotiate in progress; ends when dropped.
pub(crate) struct Negotiating<'a>(&'a InProgress);

impl Drop for Negotiating<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The node's throttles.
pub(crate) struct Throttle {
    clock: Instant,
    connect: Option<(Rate, Mutex<Bucket>)>,
    connect_per_address: Option<AddressBuckets>,
    /// Primary key, secondary key.
    rest: Option<(Rate, [Mutex<Bucket>; 2])>,
    negotiations: InProgress,
    handshakes: InProgress,
}

impl Throttle {
    pub(crate) fn new(settings: &Throttling) -> Throttle {
        Self::with_address_capacity(settings, MAX_TRACKED_ADDRESSES)
    }

    fn with_address_capacity(settings: &Throttling, capacity: usize) -> Throttle {
        Throttle {
            clock: Instant::now(),
            connect: Rate::new(settings.connect_rate, settings.connect_burst)
                .map(|rate| (rate, Mutex::new(Bucket::default()))),
            connect_per_address: Rate::new(
                settings.connect_rate_per_address,
                settings.connect_burst_per_address,
            )
            .map(|rate| AddressBuckets::new(rate, capacity)),
            rest: Rate::new(settings.rest_rate_per_key, settings.rest_burst_per_key)
                .map(|rate| (rate, Default::default())),
            negotiations: InProgress::new(settings.max_negotiations_in_progress),
            handshakes: InProgress::new(settings.max_handshakes_in_progress),
        }
    }

    fn now_ns(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64
    }

    /// A new client connection from `source` (`None`: not known, or a trusted proxy that
    /// named nobody behind it): its address's bucket first, so one address that is refused
    /// does not spend the node's allowance.
    pub(crate) fn connect(&self, source: Option<IpAddr>, metrics: &Metrics) -> Result<(), Refusal> {
        let now = self.now_ns();
        if let (Some(buckets), Some(source)) = (&self.connect_per_address, source) {
            buckets
                .take(source, now)
                .map_err(|wait| refused(metrics, Throttled::ConnectAddress, wait))?;
        }
        if let Some((rate, bucket)) = &self.connect {
            bucket
                .lock()
                .take(*rate, now)
                .map_err(|wait| refused(metrics, Throttled::ConnectNode, wait))?;
        }
        Ok(())
    }

    /// A REST request signed with `key`.
    pub(crate) fn rest(&self, key: SigningKey, metrics: &Metrics) -> Result<(), Refusal> {
        let Some((rate, buckets)) = &self.rest else {
            return Ok(());
        };
        let bucket = match key {
            SigningKey::Primary => &buckets[0],
            SigningKey::Secondary => &buckets[1],
        };
        let now = self.now_ns();
        bucket
            .lock()
            .take(*rate, now)
            .map_err(|wait| refused(metrics, Throttled::Rest, wait))
    }

    /// A negotiate begins; it counts until the guard is dropped.
    pub(crate) fn negotiate(&self, metrics: &Metrics) -> Result<Negotiating<'_>, Refusal> {
        if !self.negotiations.try_begin() {
            return Err(busy(metrics, Throttled::Negotiations));
        }
        Ok(Negotiating(&self.negotiations))
    }

    /// A client's transport opened; its handshake is awaited. Pair with
    /// [`Self::handshake_ended`] (once).
    pub(crate) fn handshake_begins(&self, metrics: &Metrics) -> Result<(), Refusal> {
        if !self.handshakes.try_begin() {
            return Err(busy(metrics, Throttled::Handshakes));
        }
        Ok(())
    }

    pub(crate) fn handshake_ended(&self) {
        self.handshakes.end();
    }

    /// Drops the per-address buckets that filled up again (every second, from the heartbeat).
    pub(crate) fn sweep(&self) {
        if let Some(buckets) = &self.connect_per_address {
            buckets.sweep(self.now_ns());
        }
    }

    /// Source addresses with a connect bucket kept.
    #[cfg(test)]
    fn tracked_addresses(&self) -> usize {
        self.connect_per_address
            .as_ref()
            .map_or(0, AddressBuckets::len)
    }
}

fn refused(metrics: &Metrics, why: Throttled, wait: Duration) -> Refusal {
    count(metrics, why);
    Refusal::after(why, wait)
}

fn busy(metrics: &Metrics, why: Throttled) -> Refusal {
    count(metrics, why);
    Refusal {
        why,
        retry_after_secs: BUSY_RETRY_AFTER_SECS,
    }
}

fn count(metrics: &Metrics, why: Throttled) {
    metrics
        .throttled
        .get_or_create(&KindLabel { kind: why.kind() })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_bucket_gives_its_burst_then_one_token_per_interval() {
        let rate = Rate::new(2, 5).unwrap();
        let mut bucket = Bucket::default();
        let start = 10 * SECOND;
        for _ in 0..5 {
            bucket.take(rate, start).unwrap();
        }
        let wait = bucket.take(rate, start).unwrap_err();
        assert_eq!(wait, Duration::from_millis(500));
        assert!(bucket.take(rate, start + SECOND / 2 - 1).is_err());
        bucket.take(rate, start + SECOND / 2).unwrap();
        // Idle long enough, it is full again: a whole burst.
        let later = start + 10 * SECOND;
        assert!(bucket.is_full(later));
        for _ in 0..5 {
            bucket.take(rate, later).unwrap();
        }
        assert!(bucket.take(rate, later).is_err());
    }

    #[test]
    fn a_burst_of_zero_is_the_rate_and_retry_after_rounds_up() {
        let rate = Rate::new(3, 0).unwrap();
        let mut bucket = Bucket::default();
        for _ in 0..3 {
            bucket.take(rate, SECOND).unwrap();
        }
        let wait = bucket.take(rate, SECOND).unwrap_err();
        let refusal = Refusal::after(Throttled::ConnectNode, wait);
        assert_eq!(refusal.retry_after_secs, 1);
        assert_eq!(
            Refusal::after(Throttled::Rest, Duration::from_millis(2001)).retry_after_secs,
            3
        );
        assert!(Rate::new(0, 10).is_none());
    }

    #[test]
    fn ipv6_addresses_share_their_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(a), address_key(b));
        assert_ne!(address_key(a), address_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(address_key(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    }

    /// Many addresses (one /64 each, as an attacker with IPv6 has) never grow the table past
    /// its cap; once their buckets are full again they make room, and a known address is
    /// always served from its own bucket.
    #[test]
    fn the_address_table_stays_within_its_cap() {
        let settings = Throttling {
            connect_rate_per_address: 1,
            connect_burst_per_address: 2,
            ..Throttling::default()
        };
        let throttle = Throttle::with_address_capacity(&settings, 1000);
        let buckets = throttle.connect_per_address.as_ref().unwrap();
        let known: IpAddr = "192.0.2.1".parse().unwrap();
        buckets.take(known, 0).unwrap();
        let mut refused = 0;
        for n in 0..200_000u128 {
            let address = IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | (n << 64)));
            if buckets.take(address, n as u64).is_err() {
                refused += 1;
            }
            assert!(buckets.len() <= 1000);
        }
        assert!(refused > 0, "a full table refuses newcomers");
        assert!(buckets.take(known, 200_000).is_ok(), "a tracked address");
        // Two seconds on, every bucket is full again: a sweep empties the table.
        buckets.sweep(3 * SECOND);
        assert_eq!(throttle.tracked_addresses(), 0);
    }

    #[test]
    fn work_in_progress_is_bounded_and_released() {
        let settings = Throttling {
            max_negotiations_in_progress: 2,
            max_handshakes_in_progress: 1,
            ..Throttling::default()
        };
        let throttle = Throttle::new(&settings);
        let metrics = Metrics::default();
        let one = throttle.negotiate(&metrics).unwrap();
        let _two = throttle.negotiate(&metrics).unwrap();
        let refusal = throttle.negotiate(&metrics).err().unwrap();
        assert_eq!(refusal.why, Throttled::Negotiations);
        assert!(!refusal.why.is_rate());
        drop(one);
        assert!(throttle.negotiate(&metrics).is_ok());
        throttle.handshake_begins(&metrics).unwrap();
        assert!(throttle.handshake_begins(&metrics).is_err());
        throttle.handshake_ended();
        throttle.handshake_begins(&metrics).unwrap();
        assert!(metrics
            .encode()
            .contains("switchyard_throttled_total{kind=\"handshakes\"} 1"));
    }
}
