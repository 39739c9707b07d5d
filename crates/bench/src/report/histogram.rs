//! Delivery latencies: an HDR histogram turned into the report's [`Latency`] (percentiles and
//! Azure's latency buckets), Azure's "≥ 1 s" share, and the HdrHistogram V2 encoding (no
//! deflate) that ships a histogram from a load-generator process to the one that reports.

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use switchyard_capacity::report::Latency;

/// Upper bounds (exclusive, ms) of Azure's v1 latency buckets `message:lt:100` …
/// `message:lt:1000`; an 11th bucket, `message:ge:1000`, takes the rest.
pub const BUCKETS_V1_MS: [u64; 10] = [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000];

/// Upper bounds (exclusive, ms) of Azure's v2 latency classes (`LessThan50ms` …
/// `LessThan5s`); an 8th bucket (`MoreThan5s`) takes the rest.
pub const BUCKETS_V2_MS: [u64; 7] = [50, 100, 200, 500, 1000, 2000, 5000];

/// Azure's v2 latency class names, in [`BUCKETS_V2_MS`] order plus the overflow class.
pub(super) const V2_CLASS_NAMES: [&str; 8] = [
    "LessThan50ms",
    "LessThan100ms",
    "LessThan200ms",
    "LessThan500ms",
    "LessThan1s",
    "LessThan2s",
    "LessThan5s",
    "MoreThan5s",
];

/// Named bucket counts, as in [`Latency::buckets_v1`] / [`Latency::buckets_v2`].
pub type Buckets = Vec<(String, u64)>;

/// Index (0‥=10) of the v1 bucket a latency of `ms` milliseconds falls in. Negative
/// latencies (clock skew between machines) count as 0, as Azure's tool does; NaN falls in
/// the last bucket.
pub fn bucket_v1(ms: f64) -> usize {
    bucket(&BUCKETS_V1_MS, ms)
}

/// Index (0‥=7) of the v2 bucket a latency of `ms` milliseconds falls in.
pub fn bucket_v2(ms: f64) -> usize {
    bucket(&BUCKETS_V2_MS, ms)
}

fn bucket(bounds: &[u64], ms: f64) -> usize {
    let ms = if ms < 0.0 { 0.0 } else { ms };
    bounds
        .iter()
        .position(|&b| ms < b as f64)
        .unwrap_or(bounds.len())
}

/// Report names of the v1 buckets: `message:lt:100` … `message:lt:1000`, `message:ge:1000`.
pub fn bucket_names_v1() -> Vec<String> {
    bucket_names(&BUCKETS_V1_MS)
}

/// Report names of the v2 buckets: `message:lt:50` … `message:lt:5000`, `message:ge:5000`.
pub fn bucket_names_v2() -> Vec<String> {
    bucket_names(&BUCKETS_V2_MS)
}

fn bucket_names(bounds: &[u64]) -> Vec<String> {
    let mut names: Vec<String> = bounds.iter().map(|b| format!("message:lt:{b}")).collect();
    if let Some(last) = bounds.last() {
        names.push(format!("message:ge:{last}"));
    }
    names
}

/// The report's v1 and v2 bucket vectors from a histogram of delivery latencies in
/// **microseconds**.
///
/// Each recorded value is placed by the highest value the histogram treats as equal to it,
/// so a latency within the histogram's resolution of a bound counts in the slower bucket
/// (never flatters a run). `lost` deliveries are not put in any bucket: they are reported
/// in `Counts::lost`, and Azure's rule counts them as ≥ 1 s (see [`share_over_1s`]). The
/// argument is here so callers hand the two over together.
pub fn latency_buckets(hist: &Histogram<u64>) -> (Buckets, Buckets) {
    let mut v1 = [0u64; BUCKETS_V1_MS.len() + 1];
    let mut v2 = [0u64; BUCKETS_V2_MS.len() + 1];
    for value in hist.iter_recorded() {
        let ms = value.value_iterated_to() as f64 / 1000.0;
        let n = value.count_at_value();
        v1[bucket_v1(ms)] += n;
        v2[bucket_v2(ms)] += n;
    }
    (
        bucket_names_v1().into_iter().zip(v1).collect(),
        bucket_names_v2().into_iter().zip(v2).collect(),
    )
}

/// Percentiles (ms), mean and buckets of a histogram of delivery latencies in microseconds.
/// An empty histogram gives zeros (and buckets of zero). `lost` is not counted in any of
/// them; see [`latency_buckets`].
pub fn latency(hist: &Histogram<u64>) -> Latency {
    let (buckets_v1, buckets_v2) = latency_buckets(hist);
    let ms = |us: u64| us as f64 / 1000.0;
    let empty = hist.is_empty();
    let q = |quantile: f64| {
        if empty {
            0.0
        } else {
            ms(hist.value_at_quantile(quantile))
        }
    };
    Latency {
        p50_ms: q(0.5),
        p90_ms: q(0.9),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: if empty { 0.0 } else { ms(hist.max()) },
        mean_ms: if empty { 0.0 } else { hist.mean() / 1000.0 },
        buckets_v1,
        buckets_v2,
    }
}

/// Azure's rule, first half: the share of deliveries that took ≥ 1 s, lost ones counted as
/// ≥ 1 s. `None` when nothing was delivered or lost, or the v1 buckets are missing.
pub fn share_over_1s(buckets_v1: &[(String, u64)], lost: u64) -> Option<f64> {
    if buckets_v1.is_empty() {
        return None;
    }
    let delivered: u64 = buckets_v1.iter().map(|(_, n)| n).sum();
    let slow = buckets_v1
        .iter()
        .find(|(name, _)| name == "message:ge:1000")
        .map_or(0, |(_, n)| *n);
    let total = delivered + lost;
    (total > 0).then(|| (slow + lost) as f64 / total as f64)
}

/// HdrHistogram V2 encoding (uncompressed) of `hist`, in standard base64.
pub fn histogram_to_base64(hist: &Histogram<u64>) -> String {
    let mut bytes = Vec::new();
    // Writing into a Vec cannot fail on I/O; the only other failure is a count above
    // i64::MAX, which no run reaches.
    V2Serializer::new()
        .serialize(hist, &mut bytes)
        .expect("V2 serialization of a latency histogram");
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Reverse of [`histogram_to_base64`]; also reads V2 + deflate encodings.
pub fn histogram_from_base64(text: &str) -> Result<Histogram<u64>, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("histogram: bad base64: {e}"))?;
    Deserializer::new()
        .deserialize(&mut bytes.as_slice())
        .map_err(|e| format!("histogram: bad V2 encoding: {e:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_split_like_azure() {
        assert_eq!(bucket_v1(0.0), 0);
        assert_eq!(bucket_v1(-3.0), 0);
        assert_eq!(bucket_v1(99.9), 0);
        assert_eq!(bucket_v1(100.0), 1);
        assert_eq!(bucket_v1(999.99), 9);
        assert_eq!(bucket_v1(1000.0), 10);
        assert_eq!(bucket_v1(f64::NAN), 10);
        assert_eq!(bucket_v2(49.0), 0);
        assert_eq!(bucket_v2(50.0), 1);
        assert_eq!(bucket_v2(300.0), 3);
        assert_eq!(bucket_v2(4999.0), 6);
        assert_eq!(bucket_v2(5000.0), 7);
        assert_eq!(bucket_names_v1().len(), 11);
        assert_eq!(bucket_names_v1()[10], "message:ge:1000");
        assert_eq!(bucket_names_v2()[0], "message:lt:50");
        assert_eq!(bucket_names_v2()[7], "message:ge:5000");
    }

    #[test]
    fn histogram_buckets_and_percentiles() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        // 90 × 10 ms, 5 × 150 ms, 3 × 700 ms, 1 × 1.5 s, 1 × 6 s.
        h.record_n(10_000, 90).unwrap();
        h.record_n(150_000, 5).unwrap();
        h.record_n(700_000, 3).unwrap();
        h.record(1_500_000).unwrap();
        h.record(6_000_000).unwrap();
        let l = latency(&h);
        let v1: Vec<u64> = l.buckets_v1.iter().map(|(_, n)| *n).collect();
        assert_eq!(v1, vec![90, 5, 0, 0, 0, 0, 0, 3, 0, 0, 2]);
        assert_eq!(l.buckets_v1[1].0, "message:lt:200");
        let v2: Vec<u64> = l.buckets_v2.iter().map(|(_, n)| *n).collect();
        assert_eq!(v2, vec![90, 0, 5, 0, 3, 1, 0, 1]);
        assert_eq!(l.buckets_v2[7].0, "message:ge:5000");
        // Lost deliveries are in no bucket.
        assert_eq!(v1.iter().sum::<u64>(), 100);
        assert!((l.p50_ms - 10.0).abs() < 0.1, "{}", l.p50_ms);
        assert!((l.p90_ms - 10.0).abs() < 0.1, "{}", l.p90_ms);
        assert!((l.p99_ms - 1500.0).abs() < 2.0, "{}", l.p99_ms);
        assert!((l.max_ms - 6000.0).abs() < 6.0, "{}", l.max_ms);
        // Azure's rule: (2 slow + 7 lost) / (100 + 7).
        let share = share_over_1s(&l.buckets_v1, 7).unwrap();
        assert!((share - 9.0 / 107.0).abs() < 1e-9);
        // A value exactly on a bound goes to the slower bucket.
        let mut edge = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        edge.record(1_000_000).unwrap();
        edge.record(100_000).unwrap();
        let (v1, _) = latency_buckets(&edge);
        assert_eq!(v1[10].1, 1);
        assert_eq!(v1[1].1, 1);
    }

    #[test]
    fn empty_histogram_gives_zeros() {
        let h = Histogram::<u64>::new(3).unwrap();
        let l = latency(&h);
        assert_eq!(l.p99_ms, 0.0);
        assert_eq!(l.max_ms, 0.0);
        assert_eq!(l.buckets_v1.len(), 11);
        assert!(l.buckets_v1.iter().all(|(_, n)| *n == 0));
        assert_eq!(share_over_1s(&l.buckets_v1, 0), None);
    }

    #[test]
    fn histogram_base64_round_trip() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        for v in [1u64, 250, 9_999, 150_000, 1_000_000, 59_000_000] {
            h.record_n(v, v % 7 + 1).unwrap();
        }
        let text = histogram_to_base64(&h);
        assert!(text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c)));
        let back = histogram_from_base64(&text).unwrap();
        assert_eq!(back.len(), h.len());
        assert_eq!(back.max(), h.max());
        assert_eq!(back.min(), h.min());
        assert_eq!(back.value_at_quantile(0.5), h.value_at_quantile(0.5));
        assert_eq!(back, h);
        assert!(histogram_from_base64("not base64!").is_err());
        assert!(histogram_from_base64("AAAA").is_err());
    }
}
