//! Azure's rule, by which a step passes or fails.

use crate::report;
use crate::stats::Bucket;

/// Azure's rule: at most this share of messages may take ≥ 1 s (lost ones count), and at
/// most this share of connections may fail.
const RULE_SHARE: f64 = 0.01;

/// Azure's rule for one step; the ≥ 1 s share is the one the report prints
/// ([`report::share_over_1s`]).
pub(super) fn rule_passes(bucket: &Bucket, failed_connections: u64, connections: u64) -> bool {
    let lost = bucket.expected.saturating_sub(bucket.received);
    let (buckets_v1, _) = report::latency_buckets(&bucket.latency);
    let slow_ok = report::share_over_1s(&buckets_v1, lost).is_none_or(|share| share <= RULE_SHARE);
    let connections_ok = (failed_connections as f64) <= RULE_SHARE * connections as f64;
    slow_ok && connections_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(expected: u64, latencies_ms: &[u64]) -> Bucket {
        let mut b = Bucket::empty_step();
        b.expected = expected;
        b.received = latencies_ms.len() as u64;
        for ms in latencies_ms {
            b.latency.record(ms * 1000).unwrap();
        }
        b
    }

    #[test]
    fn azure_rule() {
        // 1 of 100 at ≥ 1 s: exactly 1 %, passes.
        let mut fast = vec![5; 99];
        fast.push(1000);
        assert!(rule_passes(&bucket(100, &fast), 0, 100));
        // 2 of 100 slow: fails.
        let mut slow = vec![5; 98];
        slow.extend([1000, 2500]);
        assert!(!rule_passes(&bucket(100, &slow), 0, 100));
        // Lost ones count as slow.
        assert!(!rule_passes(&bucket(100, &[5; 98]), 0, 100));
        assert!(rule_passes(&bucket(100, &[5; 99]), 0, 100));
        // > 1 % of connections failed.
        assert!(rule_passes(&bucket(100, &[5; 100]), 10, 1000));
        assert!(!rule_passes(&bucket(100, &[5; 100]), 11, 1000));
        // Nothing expected (idle): only connections count.
        assert!(rule_passes(&bucket(0, &[]), 0, 10));
    }
}
