//! What a bench run shows a person and what it writes for other tools.
//!
//! - [`table`]: one run as a text table laid out like the tables of Microsoft's "Performance
//!   guide for Azure SignalR Service" (one column per step), plus our own rows (latency
//!   percentiles, lost/duplicated/reordered, CPU and memory of the service and the app
//!   server) and a closing result line.
//! - [`compare_table`]: several runs side by side (Switchyard against a peer).
//! - [`LiveCounters`] / [`counters_line`]: the per-second JSON lines that Azure's own SignalR
//!   benchmark tool writes, so its scripts can read ours (see [`counters_line`] for the
//!   layout and where it comes from).
//! - [`latency_buckets`] / [`latency`]: an HDR histogram of delivery latencies turned into the
//!   report's [`Latency`].
//! - [`histogram_to_base64`] / [`histogram_from_base64`]: HdrHistogram V2 encoding (no
//!   deflate) for shipping a histogram from a load-generator process to the one that reports.
//!
//! Bandwidth is shown the way the guide shows it: `KBps` and `MBps`, 1 KB = 1,024 bytes and
//! 1 MB = 1,000 KB (the guide's "4 KBps" for 2 × 2,048 bytes/s, "2 MBps" for 1,000 × 2,048).

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use switchyard_capacity::report::{
    Cluster, Counts, Latency, ProcessUsage, RedisUsage, Report, Step,
};

/// Upper bounds (exclusive, ms) of Azure's v1 latency buckets `message:lt:100` …
/// `message:lt:1000`; an 11th bucket, `message:ge:1000`, takes the rest.
pub const BUCKETS_V1_MS: [u64; 10] = [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000];

/// Upper bounds (exclusive, ms) of Azure's v2 latency classes (`LessThan50ms` …
/// `LessThan5s`); an 8th bucket (`MoreThan5s`) takes the rest.
pub const BUCKETS_V2_MS: [u64; 7] = [50, 100, 200, 500, 1000, 2000, 5000];

/// Azure's v2 latency class names, in [`BUCKETS_V2_MS`] order plus the overflow class.
const V2_CLASS_NAMES: [&str; 8] = [
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

// ---------------------------------------------------------------------------------------
// Azure bench-tool counters
// ---------------------------------------------------------------------------------------

/// Running totals of a load generator, as Azure's bench tool counts them. All counters are
/// cumulative since the start of the run (Azure's scripts subtract two lines to get a rate).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveCounters {
    pub connections_success: u64,
    pub connections_failed: u64,
    pub connections_reconnect: u64,
    pub sent: u64,
    pub received: u64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Deliveries by latency: < 100, < 200, … < 1000 ms, ≥ 1000 ms ([`bucket_v1`]).
    pub buckets_v1: [u64; 11],
    /// Deliveries by latency: < 50, < 100, < 200, < 500, < 1000, < 2000, < 5000, ≥ 5000 ms
    /// ([`bucket_v2`]).
    pub buckets_v2: [u64; 8],
    /// Sending connections of the current step (Azure's `sendingStep`).
    pub sending_step: u64,
    /// Step number, 1-based (Azure's `epoch`: its scripts split a run into steps where it
    /// changes).
    pub epoch: u64,
}

/// One line (no trailing newline) of Azure's bench-tool counters file:
///
/// ```text
/// {"Time":"2024-05-01T12:00:01Z","Counters":{"connection:connect:success":1000,…}}
/// ```
///
/// Layout and names follow the SignalR benchmark plugin of Azure's bench tool
/// (`Azure/azure-signalr-bench`, `SignalRServiceBenchmarkPlugin/…/SignalRConstants.cs` for
/// the names, `MasterMethods/CollectStatistics.cs` for the one-line `{"Time","Counters"}`
/// record, `Internals/CountersParser/StatisticsParser.cs` for how it is read back):
///
/// | key | value |
/// | --- | --- |
/// | `connection:connect:success` / `:fail` / `connection:connect:reconnect` | connections |
/// | `message:sent`, `message:received` | messages |
/// | `message:sentSize` (the plugin's name) and `message:sendSize` (the older tools' name), `message:recvSize` | bytes |
/// | `message:lt:100` … `message:lt:1000`, `message:ge:1000` | deliveries by latency |
/// | `sendingStep`, `epoch` | current step (sending connections; 1-based step number) |
///
/// `Time` is UTC to the second; Azure writes it with a 12-hour clock by mistake
/// (`hh`), we write the 24-hour clock, which its readers parse the same way.
///
/// Our extras are under keys starting with `switchyard:`, which no Azure reader looks at:
/// `switchyard:message:lost`, and the v2 buckets as `switchyard:v2:LessThan50ms` …
/// `switchyard:v2:MoreThan5s` (the latency classes of Azure's newer tool; they cannot use the
/// `message:lt:` names, which the v1 buckets already take).
pub fn counters_line(at: SystemTime, c: &LiveCounters) -> String {
    let mut counters = serde_json::Map::new();
    let mut put = |key: &str, value: u64| {
        counters.insert(key.to_string(), serde_json::Value::from(value));
    };
    put("connection:connect:success", c.connections_success);
    put("connection:connect:fail", c.connections_failed);
    put("connection:connect:reconnect", c.connections_reconnect);
    put("message:sent", c.sent);
    put("message:received", c.received);
    put("message:sentSize", c.sent_bytes);
    put("message:sendSize", c.sent_bytes);
    put("message:recvSize", c.received_bytes);
    for (name, n) in bucket_names_v1().iter().zip(c.buckets_v1) {
        put(name, n);
    }
    put("sendingStep", c.sending_step);
    put("epoch", c.epoch);
    for (class, n) in V2_CLASS_NAMES.iter().zip(c.buckets_v2) {
        put(&format!("switchyard:v2:{class}"), n);
    }
    let mut line = serde_json::Map::new();
    line.insert("Time".into(), utc_second(at).into());
    line.insert("Counters".into(), counters.into());
    serde_json::Value::Object(line).to_string()
}

/// `YYYY-MM-DDTHH:MM:SSZ`; times before 1970 print as the epoch.
fn utc_second(at: SystemTime) -> String {
    let secs = at
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (the era-based method: 400-year
/// eras of 146,097 days, years starting in March so the leap day comes last).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0‥=146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // year of era
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // day of (March-based) year
    let mp = (5 * doy + 2) / 153; // March = 0
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

// ---------------------------------------------------------------------------------------
// Number formatting
// ---------------------------------------------------------------------------------------

const NONE: &str = "-";

/// `1234567` → `1,234,567`.
pub fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// A quantity with as many decimals as it needs to be read: ≥ 100 → whole and grouped
/// (`1,234`), ≥ 10 → one decimal, below → two; trailing zeros dropped (`2`, `2.5`, `0.42`).
pub fn fmt_number(v: f64) -> String {
    if !v.is_finite() {
        return NONE.into();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    let a = v.abs();
    if a >= 99.95 {
        return format!("{sign}{}", fmt_count(a.round() as u64));
    }
    let s = if a >= 9.995 {
        format!("{a:.1}")
    } else {
        format!("{a:.2}")
    };
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "0" {
        "0".into()
    } else {
        format!("{sign}{s}")
    }
}

/// Bytes per second the way the guide writes bandwidth: `4 KBps`, `2 MBps`, `2,000 MBps`.
pub fn fmt_bandwidth(bytes_per_s: f64) -> String {
    if !bytes_per_s.is_finite() || bytes_per_s < 0.0 {
        return NONE.into();
    }
    // The guide's units (as `switchyard capacity` prints them): 1 KB = 1,024 B, 1 MB = 1,000 KB.
    let (k, m) = (
        switchyard_capacity::guide::KB as f64,
        switchyard_capacity::guide::MB as f64,
    );
    if bytes_per_s < k {
        format!("{} Bps", fmt_number(bytes_per_s))
    } else if bytes_per_s < m {
        format!("{} KBps", fmt_number(bytes_per_s / k))
    } else {
        format!("{} MBps", fmt_number(bytes_per_s / m))
    }
}

/// A resident set size given in KiB: `812 KB`, `85.3 MB`, `1.21 GB`.
pub fn fmt_memory_kb(kb: u64) -> String {
    let kb = kb as f64;
    if kb < 1024.0 {
        format!("{} KB", fmt_number(kb))
    } else if kb < 1024.0 * 1024.0 {
        format!("{} MB", fmt_number(kb / 1024.0))
    } else {
        format!("{} GB", fmt_number(kb / (1024.0 * 1024.0)))
    }
}

fn fmt_cores(cores: f64) -> String {
    if cores.is_finite() {
        format!("{cores:.2}")
    } else {
        NONE.into()
    }
}

fn fmt_percent(share: f64) -> String {
    format!("{:.2} %", share * 100.0)
}

fn per_second(total: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        total as f64 / seconds
    } else {
        f64::NAN
    }
}

// ---------------------------------------------------------------------------------------
// Tables
// ---------------------------------------------------------------------------------------

/// The scenario as a table heading, like the guide's ("Echo", "Send to group", "REST
/// broadcast").
pub(crate) fn scenario_heading(scenario: &str) -> String {
    if scenario.is_empty() {
        return "Run".into();
    }
    let words: Vec<&str> = scenario.split(['-', '_']).collect();
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if w.eq_ignore_ascii_case("rest") {
            out.push_str("REST");
        } else if i == 0 {
            let mut chars = w.chars();
            if let Some(c) = chars.next() {
                out.extend(c.to_uppercase());
                out.push_str(chars.as_str());
            }
        } else {
            out.push_str(w);
        }
    }
    out
}

/// Renders rows (the first is the header) as a Markdown pipe table padded to line up in a
/// terminal: first column left-aligned, the others right-aligned.
fn render_table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![3usize; cols];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, row: &[String]| {
        out.push('|');
        for (i, w) in widths.iter().enumerate() {
            let cell = row.get(i).map(String::as_str).unwrap_or("");
            let pad = w - cell.chars().count();
            if i == 0 {
                let _ = write!(out, " {cell}{} |", " ".repeat(pad));
            } else {
                let _ = write!(out, " {}{cell} |", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    if let Some((header, body)) = rows.split_first() {
        line(&mut out, header);
        out.push('|');
        for (i, w) in widths.iter().enumerate() {
            if i == 0 {
                let _ = write!(out, ":{}|", "-".repeat(w + 1));
            } else {
                let _ = write!(out, "{}:|", "-".repeat(w + 1));
            }
        }
        out.push('\n');
        for row in body {
            line(&mut out, row);
        }
    }
    out
}

/// One column of [`table`]: a step, or the whole run when the report has no steps.
struct Column<'a> {
    label: String,
    senders: Option<u64>,
    connections: u64,
    seconds: f64,
    counts: &'a Counts,
    latency: &'a Latency,
    inbound_per_s: f64,
    outbound_per_s: f64,
    passed: bool,
    service: Option<&'a ProcessUsage>,
    app_server: Option<&'a ProcessUsage>,
    cpu_us_per_delivery: Option<f64>,
    redis: Option<&'a RedisUsage>,
    generator: Option<&'a ProcessUsage>,
}

impl<'a> Column<'a> {
    fn of_step(step: &'a Step) -> Self {
        Column {
            label: format!("Step {}", step.index),
            senders: Some(step.senders),
            connections: step.connections,
            seconds: step.seconds,
            counts: &step.counts,
            latency: &step.latency,
            inbound_per_s: step.inbound_per_s,
            outbound_per_s: step.outbound_per_s,
            passed: step.passed,
            service: step.service.as_ref(),
            app_server: step.app_server.as_ref(),
            cpu_us_per_delivery: step.service_cpu_us_per_delivery,
            redis: step.redis.as_ref(),
            generator: step.generator.as_ref(),
        }
    }

    fn of_run(report: &'a Report) -> Self {
        let c = &report.counts;
        Column {
            label: "Run".into(),
            senders: None,
            connections: report.connections,
            seconds: report.seconds,
            counts: c,
            latency: &report.latency,
            inbound_per_s: per_second(c.sent, report.seconds),
            outbound_per_s: per_second(c.received, report.seconds),
            passed: report.passed,
            service: report.service.as_ref(),
            app_server: report.app_server.as_ref(),
            cpu_us_per_delivery: report
                .service
                .as_ref()
                .filter(|_| c.received > 0)
                .map(|s| s.cpu_seconds * 1e6 / c.received as f64),
            redis: report.cluster.as_ref().and_then(|c| c.redis.as_ref()),
            generator: None,
        }
    }

    fn columns(report: &'a Report) -> Vec<Column<'a>> {
        if report.steps.is_empty() {
            vec![Column::of_run(report)]
        } else {
            report.steps.iter().map(Column::of_step).collect()
        }
    }
}

/// The run's settings in one or two lines (shared by [`table`] and the charts).
pub fn describe(report: &Report) -> (String, String) {
    let tool = if report.tool.is_empty() {
        "switchyard-bench"
    } else {
        report.tool.as_str()
    };
    let scenario = if report.scenario.is_empty() {
        "run"
    } else {
        report.scenario.as_str()
    };
    let mut first = format!("{tool}: {scenario}");
    if !report.target.is_empty() {
        let _ = write!(first, " on {}", report.target);
    }
    if !report.mode.is_empty() {
        let _ = write!(first, " ({} mode)", report.mode);
    }
    let wire: Vec<&str> = [report.transport.as_str(), report.protocol.as_str()]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    if !wire.is_empty() {
        let _ = write!(first, ", {}", wire.join(" + "));
    }
    let mut second = format!(
        "{} connections, {}-byte messages",
        fmt_count(report.connections),
        fmt_count(report.message_size as u64)
    );
    if report.scenario.ends_with("chat-room") && report.send_interval_ms > 0.0 {
        // The profile's posters, in the run's intervals.
        let _ = write!(
            second,
            ", 10 % post every {} ms and 20 % every {} ms",
            fmt_number(report.send_interval_ms * crate::scenario::CHATTY_INTERVALS),
            fmt_number(report.send_interval_ms * crate::scenario::CASUAL_INTERVALS)
        );
    } else if report.send_interval_ms > 0.0 {
        let _ = write!(second, " every {} ms", fmt_number(report.send_interval_ms));
    }
    if let (Some(size), Some(groups)) = (report.group_size, report.groups) {
        let _ = write!(
            second,
            ", {} groups of {}",
            fmt_count(groups),
            fmt_count(size)
        );
    }
    if report.workers > 0 {
        let _ = write!(
            second,
            ", {} worker{}",
            report.workers,
            if report.workers == 1 { "" } else { "s" }
        );
    }
    if !report.started_at.is_empty() {
        let _ = write!(second, ", started {}", report.started_at);
    }
    if report.seconds > 0.0 {
        let _ = write!(second, ", {} s", fmt_number(report.seconds));
    }
    (first, second)
}

/// The step [`compare_table`] and the result line talk about: the last passing one.
pub(crate) fn last_passing(report: &Report) -> Option<&Step> {
    let index = report.last_passing_step?;
    report
        .steps
        .iter()
        .find(|s| s.index == index)
        .or_else(|| report.steps.get(index.wrapping_sub(1)))
}

/// The closing line of [`table`].
pub fn result_line(report: &Report) -> String {
    let unit = match &report.azure_unit {
        Some(unit) => format!("it equals or exceeds Azure {unit} for this scenario"),
        // Our own scenarios (rest-send-to-group …) have no row in Azure's guide.
        None if switchyard_capacity::plan::classify(report).is_none() => {
            "Azure's guide publishes no figures for this scenario".into()
        }
        None => "it does not reach any Azure unit's published figure for this scenario".into(),
    };
    match (report.last_passing_step, last_passing(report)) {
        (Some(_), Some(step)) => format!(
            "Result: step {} ({} sending connections: {} inbound/s, {} outbound/s) is the last \
             passing step; {unit}.",
            step.index,
            fmt_count(step.senders),
            fmt_number(step.inbound_per_s),
            fmt_number(step.outbound_per_s),
        ),
        (Some(index), None) => format!("Result: step {index} is the last passing step; {unit}."),
        (None, _) if report.steps.is_empty() && report.passed => {
            format!("Result: the run passed; {unit}.")
        }
        (None, _) => "Result: no step passed Azure's rule (at most 1 % of deliveries at 1 s or \
                      more, lost ones included, and at most 1 % of connections failed)."
            .into(),
    }
}

/// One run as a text table, one column per step (or one for the whole run when it has no
/// steps), with the settings above and the result below.
pub fn table(report: &Report) -> String {
    let cols = Column::columns(report);
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&Column<'_>) -> String| {
        let mut r = vec![name.to_string()];
        r.extend(cols.iter().map(f));
        rows.push(r);
    };
    let mut header = vec![scenario_heading(&report.scenario)];
    header.extend(cols.iter().map(|c| c.label.clone()));
    row("Connections", &|c| fmt_count(c.connections));
    if cols.iter().any(|c| c.senders.is_some()) {
        row("Sending connections", &|c| {
            c.senders.map_or(NONE.into(), fmt_count)
        });
    }
    if let Some(size) = report.group_size {
        row("Group member count", &|_| fmt_count(size));
    }
    if let Some(groups) = report.groups {
        row("Group count", &|_| fmt_count(groups));
    }
    row("Inbound (messages/s)", &|c| fmt_number(c.inbound_per_s));
    row("Outbound (messages/s)", &|c| fmt_number(c.outbound_per_s));
    row("Inbound bandwidth", &|c| {
        fmt_bandwidth(per_second(c.counts.sent_bytes, c.seconds))
    });
    row("Outbound bandwidth", &|c| {
        fmt_bandwidth(per_second(c.counts.received_bytes, c.seconds))
    });
    row("Seconds", &|c| fmt_number(c.seconds));
    row("Latency p50 (ms)", &|c| fmt_number(c.latency.p50_ms));
    row("Latency p90 (ms)", &|c| fmt_number(c.latency.p90_ms));
    row("Latency p99 (ms)", &|c| fmt_number(c.latency.p99_ms));
    row("Latency p99.9 (ms)", &|c| fmt_number(c.latency.p999_ms));
    row("Latency max (ms)", &|c| fmt_number(c.latency.max_ms));
    row("Deliveries ≥ 1 s or lost", &|c| {
        share_over_1s(&c.latency.buckets_v1, c.counts.lost).map_or(NONE.into(), fmt_percent)
    });
    row("Lost / duplicated / reordered", &|c| {
        format!(
            "{} / {} / {}",
            fmt_count(c.counts.lost),
            fmt_count(c.counts.duplicated),
            fmt_count(c.counts.reordered)
        )
    });
    row("Connections failed", &|c| {
        fmt_count(c.counts.connections_failed)
    });
    row("Service CPU (cores)", &|c| {
        c.service.map_or(NONE.into(), |u| fmt_cores(u.cores))
    });
    row("Service RSS", &|c| {
        c.service.map_or(NONE.into(), |u| fmt_memory_kb(u.rss_kb))
    });
    row("Service CPU µs/delivery", &|c| {
        c.cpu_us_per_delivery.map_or(NONE.into(), fmt_number)
    });
    if cols.iter().any(|c| c.generator.is_some()) {
        // Shares the machine with the service: when service + generator near the cores,
        // latency is the machine's, not the service's.
        row("Load generator CPU (cores)", &|c| {
            c.generator.map_or(NONE.into(), |u| fmt_cores(u.cores))
        });
    }
    if cols.iter().any(|c| c.redis.is_some()) {
        row("Redis CPU (cores)", &|c| {
            c.redis
                .filter(|r| r.seconds > 0.0)
                .map_or(NONE.into(), |r| fmt_cores(r.cpu_seconds / r.seconds))
        });
        row("Redis CPU µs/message", &|c| {
            c.redis
                .and_then(|r| r.cpu_us_per_message)
                .map_or(NONE.into(), fmt_number)
        });
        row("Redis bytes/message", &|c| {
            c.redis
                .and_then(|r| r.bytes_per_message)
                .map_or(NONE.into(), fmt_number)
        });
        row("PUBLISH per message sent", &|c| {
            c.redis
                .and_then(|r| r.publish_per_message)
                .map_or(NONE.into(), fmt_number)
        });
    }
    if cols.iter().any(|c| c.app_server.is_some()) {
        row("App server CPU (cores)", &|c| {
            c.app_server.map_or(NONE.into(), |u| fmt_cores(u.cores))
        });
        row("App server RSS", &|c| {
            c.app_server
                .map_or(NONE.into(), |u| fmt_memory_kb(u.rss_kb))
        });
    }
    row("Azure rule", &|c| {
        if c.passed { "pass" } else { "FAIL" }.into()
    });
    rows.insert(0, header);

    let (first, second) = describe(report);
    let mut out = format!("{first}\n{second}\n\n");
    out.push_str(&render_table(&rows));
    out.push('\n');
    if !report.steps.is_empty() {
        let c = &report.counts;
        let l = &report.latency;
        let _ = writeln!(
            out,
            "Whole run: sent {}, expected {}, received {}, lost {}, duplicated {}, reordered {}, \
             connections failed {}; latency p50 {} ms, p99 {} ms, max {} ms; {}.",
            fmt_count(c.sent),
            fmt_count(c.expected),
            fmt_count(c.received),
            fmt_count(c.lost),
            fmt_count(c.duplicated),
            fmt_count(c.reordered),
            fmt_count(c.connections_failed),
            fmt_number(l.p50_ms),
            fmt_number(l.p99_ms),
            fmt_number(l.max_ms),
            if report.passed {
                "every step passed"
            } else if report.steps.iter().any(|s| !s.passed) {
                "not every step passed"
            } else {
                "every step passed, but something was lost, duplicated or reordered"
            }
        );
    }
    if let Some(rate) = report.connects_per_s {
        let _ = writeln!(out, "Connects per second: {}.", fmt_number(rate));
    }
    if let Some(bytes) = report.service_rss_per_connection_bytes {
        let _ = writeln!(
            out,
            "Service memory per held connection: {} bytes.",
            fmt_number(bytes)
        );
    }
    if let Some(cluster) = &report.cluster {
        out.push_str(&cluster_lines(cluster));
    }
    let _ = writeln!(out, "{}", result_line(report));
    out
}

/// The nodes and Redis of a cluster run, one line each.
fn cluster_lines(cluster: &Cluster) -> String {
    let mut out = format!(
        "Cluster: {} node{} (the service figures above are their sums), REST calls into {}:\n",
        cluster.nodes.len(),
        if cluster.nodes.len() == 1 { "" } else { "s" },
        if cluster.rest_nodes.is_empty() {
            NONE
        } else {
            cluster.rest_nodes.as_str()
        }
    );
    for node in &cluster.nodes {
        let _ = write!(
            out,
            "  {} {}: {} connections",
            node.name,
            node.url,
            fmt_count(node.connections)
        );
        if let Some(p) = &node.process {
            let _ = write!(
                out,
                ", CPU {} s ({} cores), RSS {}",
                fmt_number(p.cpu_seconds),
                fmt_cores(p.cores),
                fmt_memory_kb(p.rss_kb)
            );
        }
        if let (Some(p), Some(r)) = (node.backplane_published, node.backplane_received) {
            let _ = write!(
                out,
                ", backplane published {} received {} (measured window)",
                fmt_count(p),
                fmt_count(r)
            );
        }
        out.push_str(".\n");
    }
    if let Some(r) = &cluster.redis {
        let _ = write!(
            out,
            "  Redis over {} s: CPU {} s, in {} bytes, out {} bytes, {} commands, {} PUBLISH for {} messages sent",
            fmt_number(r.seconds),
            fmt_number(r.cpu_seconds),
            fmt_count(r.net_input_bytes),
            fmt_count(r.net_output_bytes),
            fmt_count(r.commands),
            fmt_count(r.publish_calls),
            fmt_count(r.messages_sent)
        );
        if let Some(p) = &r.process {
            let _ = write!(
                out,
                "; redis-server in /proc: CPU {} s, RSS {}",
                fmt_number(p.cpu_seconds),
                fmt_memory_kb(p.rss_kb)
            );
        }
        let per = |v: Option<f64>| v.map_or(NONE.to_string(), fmt_number);
        let _ = writeln!(
            out,
            ".\n  Per message sent: Redis CPU {} µs, {} bytes, {} PUBLISH.",
            per(r.cpu_us_per_message),
            per(r.bytes_per_message),
            per(r.publish_per_message)
        );
    }
    out
}

/// The figures of one run that [`compare_table`] shows.
struct Headline<'a> {
    /// What the step column says about the step shown.
    which: String,
    inbound_per_s: f64,
    outbound_per_s: f64,
    inbound_bps: f64,
    outbound_bps: f64,
    latency: &'a Latency,
    service: Option<&'a ProcessUsage>,
    cpu_us_per_delivery: Option<f64>,
    redis: Option<&'a RedisUsage>,
}

impl<'a> Headline<'a> {
    fn of(report: &'a Report) -> Self {
        let of_step = |step: &'a Step, which: String| Headline {
            which,
            inbound_per_s: step.inbound_per_s,
            outbound_per_s: step.outbound_per_s,
            inbound_bps: per_second(step.counts.sent_bytes, step.seconds),
            outbound_bps: per_second(step.counts.received_bytes, step.seconds),
            latency: &step.latency,
            service: step.service.as_ref().or(report.service.as_ref()),
            cpu_us_per_delivery: step.service_cpu_us_per_delivery,
            redis: step.redis.as_ref(),
        };
        let total = report.steps.len();
        if let Some(step) = last_passing(report) {
            let which = format!(
                "{} of {total} ({} senders)",
                step.index,
                fmt_count(step.senders)
            );
            return of_step(step, which);
        }
        if let Some(step) = report.steps.last() {
            let which = format!(
                "none passed; {} of {total} ({} senders)",
                step.index,
                fmt_count(step.senders)
            );
            return of_step(step, which);
        }
        let col = Column::of_run(report);
        Headline {
            which: if report.passed {
                "whole run (passed)".into()
            } else {
                "whole run (failed)".into()
            },
            inbound_per_s: col.inbound_per_s,
            outbound_per_s: col.outbound_per_s,
            inbound_bps: per_second(report.counts.sent_bytes, report.seconds),
            outbound_bps: per_second(report.counts.received_bytes, report.seconds),
            latency: &report.latency,
            service: report.service.as_ref(),
            cpu_us_per_delivery: col.cpu_us_per_delivery,
            redis: col.redis,
        }
    }
}

/// A name for each run: its target, numbered (`switchyard #2`) when two runs share one.
pub(crate) fn run_labels(reports: &[&Report]) -> Vec<String> {
    let mut labels: Vec<String> = reports
        .iter()
        .enumerate()
        .map(|(i, r)| {
            if r.target.is_empty() {
                format!("run {}", i + 1)
            } else {
                r.target.clone()
            }
        })
        .collect();
    let shared: Vec<bool> = labels
        .iter()
        .map(|l| labels.iter().filter(|m| *m == l).count() > 1)
        .collect();
    for (i, label) in labels.iter_mut().enumerate() {
        if shared[i] {
            let _ = write!(label, " #{}", i + 1);
        }
    }
    labels
}

/// `a ÷ b` as `1.23×`, or nothing when either side is missing or `b` is zero.
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a.is_finite() && b.is_finite() && b != 0.0 => {
            format!("{:.2}×", a / b)
        }
        _ => String::new(),
    }
}

/// Several runs side by side, one column per run (headed by its target). Throughput,
/// latency and the service's CPU/memory are those of each run's last passing step (or, when
/// none passed, its last step, which the "Step shown" row says). With exactly two runs a
/// last column gives first ÷ second for throughput, CPU and memory.
pub fn compare_table(reports: &[&Report]) -> String {
    if reports.is_empty() {
        return "No reports to compare.\n".into();
    }
    let heads: Vec<Headline<'_>> = reports.iter().map(|r| Headline::of(r)).collect();
    let labels = run_labels(reports);
    let pair = reports.len() == 2;

    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec![String::new()];
    header.extend(labels.iter().cloned());
    if pair {
        header.push(format!("{} ÷ {}", labels[0], labels[1]));
    }
    rows.push(header);

    // `text` gives each cell; `value`, when given, the number the ratio column divides.
    type Text<'r> = dyn Fn(&Report, &Headline<'_>) -> String + 'r;
    type Value<'r> = dyn Fn(&Report, &Headline<'_>) -> Option<f64> + 'r;
    let mut row = |name: &str, text: &Text<'_>, value: Option<&Value<'_>>| {
        let mut r = vec![name.to_string()];
        r.extend(reports.iter().zip(&heads).map(|(rep, h)| text(rep, h)));
        if pair {
            r.push(value.map_or(String::new(), |v| {
                ratio(v(reports[0], &heads[0]), v(reports[1], &heads[1]))
            }));
        }
        rows.push(r);
    };

    let or_none = |s: &str| {
        if s.is_empty() {
            NONE.to_string()
        } else {
            s.to_string()
        }
    };
    row("Scenario", &|r, _| or_none(&r.scenario), None);
    row("Mode", &|r, _| or_none(&r.mode), None);
    row(
        "Transport / protocol",
        &|r, _| format!("{} / {}", or_none(&r.transport), or_none(&r.protocol)),
        None,
    );
    row("Connections", &|r, _| fmt_count(r.connections), None);
    row(
        "Message size (bytes)",
        &|r, _| fmt_count(r.message_size as u64),
        None,
    );
    row("Step shown", &|_, h| h.which.clone(), None);
    row(
        "Inbound (messages/s)",
        &|_, h| fmt_number(h.inbound_per_s),
        Some(&|_, h| Some(h.inbound_per_s)),
    );
    row(
        "Outbound (messages/s)",
        &|_, h| fmt_number(h.outbound_per_s),
        Some(&|_, h| Some(h.outbound_per_s)),
    );
    row(
        "Inbound bandwidth",
        &|_, h| fmt_bandwidth(h.inbound_bps),
        Some(&|_, h| Some(h.inbound_bps)),
    );
    row(
        "Outbound bandwidth",
        &|_, h| fmt_bandwidth(h.outbound_bps),
        Some(&|_, h| Some(h.outbound_bps)),
    );
    row(
        "Latency p50 (ms)",
        &|_, h| fmt_number(h.latency.p50_ms),
        None,
    );
    row(
        "Latency p99 (ms)",
        &|_, h| fmt_number(h.latency.p99_ms),
        None,
    );
    row(
        "Latency max (ms)",
        &|_, h| fmt_number(h.latency.max_ms),
        None,
    );
    row(
        "Lost / duplicated / reordered (run)",
        &|r, _| {
            format!(
                "{} / {} / {}",
                fmt_count(r.counts.lost),
                fmt_count(r.counts.duplicated),
                fmt_count(r.counts.reordered)
            )
        },
        None,
    );
    row(
        "Connections failed (run)",
        &|r, _| fmt_count(r.counts.connections_failed),
        None,
    );
    row(
        "Service CPU (cores)",
        &|_, h| h.service.map_or(NONE.into(), |u| fmt_cores(u.cores)),
        Some(&|_, h| h.service.map(|u| u.cores)),
    );
    row(
        "Service RSS",
        &|_, h| h.service.map_or(NONE.into(), |u| fmt_memory_kb(u.rss_kb)),
        Some(&|_, h| h.service.map(|u| u.rss_kb as f64)),
    );
    row(
        "Service CPU µs/delivery",
        &|_, h| h.cpu_us_per_delivery.map_or(NONE.into(), fmt_number),
        Some(&|_, h| h.cpu_us_per_delivery),
    );
    if reports.iter().any(|r| r.cluster.is_some()) {
        row(
            "Nodes (REST into)",
            &|r, _| match &r.cluster {
                Some(c) => format!("{} ({})", c.nodes.len(), or_none(&c.rest_nodes)),
                None => "1".into(),
            },
            None,
        );
        let redis = |h: &Headline<'_>, f: &dyn Fn(&RedisUsage) -> Option<f64>| {
            h.redis.and_then(f).map_or(NONE.into(), fmt_number)
        };
        row(
            "Redis CPU µs/message",
            &|_, h| redis(h, &|r| r.cpu_us_per_message),
            Some(&|_, h| h.redis.and_then(|r| r.cpu_us_per_message)),
        );
        row(
            "Redis bytes/message",
            &|_, h| redis(h, &|r| r.bytes_per_message),
            Some(&|_, h| h.redis.and_then(|r| r.bytes_per_message)),
        );
        row(
            "PUBLISH per message sent",
            &|_, h| redis(h, &|r| r.publish_per_message),
            None,
        );
    }
    row(
        "Azure unit reached",
        &|r, _| r.azure_unit.clone().unwrap_or_else(|| NONE.into()),
        None,
    );
    row(
        "Run passed",
        &|r, _| if r.passed { "yes" } else { "no" }.into(),
        None,
    );

    let mut out = render_table(&rows);
    if pair {
        out.push_str(
            "\nRatios are first ÷ second: above 1 means the first moves more (throughput) or \
             uses more (CPU, memory).\n",
        );
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::time::Duration;

    fn usage(cores: f64, rss_kb: u64) -> ProcessUsage {
        ProcessUsage {
            pid: 42,
            cpu_seconds: cores * 30.0,
            cores,
            rss_kb,
            hwm_kb: rss_kb,
        }
    }

    fn buckets(fast: u64, slow: u64) -> Vec<(String, u64)> {
        let mut counts = [0u64; 11];
        counts[0] = fast;
        counts[10] = slow;
        bucket_names_v1().into_iter().zip(counts).collect()
    }

    fn step(index: usize, senders: u64, passed: bool) -> Step {
        let sent = senders * 30;
        let slow = if passed { 0 } else { sent / 10 };
        Step {
            index,
            senders,
            connections: 1000,
            seconds: 30.0,
            counts: Counts {
                sent,
                expected: sent,
                received: sent,
                sent_bytes: sent * 2048,
                received_bytes: sent * 2048,
                ..Counts::default()
            },
            latency: Latency {
                p50_ms: 1.5 * index as f64,
                p90_ms: 3.0 * index as f64,
                p99_ms: 12.3 * index as f64,
                p999_ms: 40.0 * index as f64,
                max_ms: if passed { 95.0 } else { 2500.0 },
                mean_ms: 2.0,
                buckets_v1: buckets(sent - slow, slow),
                buckets_v2: Vec::new(),
            },
            inbound_per_s: senders as f64,
            outbound_per_s: senders as f64,
            passed,
            service: Some(usage(0.25 * index as f64, 81_920 + 1024 * index as u64)),
            app_server: Some(usage(0.5, 40_960)),
            service_cpu_us_per_delivery: Some(250.0),
            redis: None,
            generator: None,
        }
    }

    /// Echo, steps of 250 / 500 / 750 / 1,000 senders; the last one fails.
    pub(crate) fn multi_step() -> Report {
        let steps: Vec<Step> = [250, 500, 750, 1000]
            .iter()
            .enumerate()
            .map(|(i, &s)| step(i + 1, s, s < 1000))
            .collect();
        Report {
            tool: "switchyard-bench 0.1.0".into(),
            scenario: "echo".into(),
            target: "switchyard".into(),
            mode: "default".into(),
            transport: "websockets".into(),
            protocol: "json".into(),
            connections: 1000,
            message_size: 2048,
            send_interval_ms: 1000.0,
            workers: 1,
            started_at: "2025-01-02T03:04:05Z".into(),
            seconds: 120.0,
            counts: Counts {
                sent: 75_000,
                expected: 75_000,
                received: 75_000,
                ..Counts::default()
            },
            latency: Latency {
                p50_ms: 2.0,
                p99_ms: 30.0,
                max_ms: 2500.0,
                ..Latency::default()
            },
            steps,
            last_passing_step: Some(3),
            passed: false,
            service: Some(usage(0.6, 90_000)),
            app_server: Some(usage(0.5, 40_960)),
            azure_unit: Some("Unit1".into()),
            ..Report::default()
        }
    }

    /// Broadcast, one step, passing, with a per-second timeline.
    pub(crate) fn single_step() -> Report {
        let mut s = step(1, 2, true);
        s.connections = 1000;
        s.outbound_per_s = 2000.0;
        s.counts.received = 60_000;
        s.counts.expected = 60_000;
        s.counts.received_bytes = 60_000 * 2048;
        let timeline = (0..30)
            .map(|i| switchyard_capacity::report::Second {
                second: i,
                step: 1,
                sent: 2,
                received: 2000,
                p50_ms: 1.0 + (i % 5) as f64 * 0.1,
                p99_ms: 8.0,
                max_ms: 20.0 + i as f64,
            })
            .collect();
        Report {
            tool: "switchyard-bench 0.1.0".into(),
            scenario: "broadcast".into(),
            target: "switchyard".into(),
            mode: "default".into(),
            transport: "websockets".into(),
            protocol: "messagepack".into(),
            connections: 1000,
            message_size: 2048,
            send_interval_ms: 1000.0,
            workers: 2,
            seconds: 30.0,
            counts: s.counts.clone(),
            latency: s.latency.clone(),
            steps: vec![s],
            timeline,
            last_passing_step: Some(1),
            passed: true,
            azure_unit: Some("Unit1".into()),
            ..Report::default()
        }
    }

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

    #[test]
    fn counters_line_has_azure_layout() {
        let mut c = LiveCounters {
            connections_success: 998,
            connections_failed: 2,
            connections_reconnect: 1,
            sent: 5000,
            sent_bytes: 5000 * 2100,
            received: 4,
            received_bytes: 4 * 2100,
            sending_step: 500,
            epoch: 2,
            ..LiveCounters::default()
        };
        for ms in [12.0, 150.0, 1200.0, 7000.0] {
            c.buckets_v1[bucket_v1(ms)] += 1;
            c.buckets_v2[bucket_v2(ms)] += 1;
        }
        let at = UNIX_EPOCH + Duration::from_secs(1_714_564_801); // 2024-05-01T12:00:01Z
        let line = counters_line(at, &c);
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["Time"], "2024-05-01T12:00:01Z");
        let k = &v["Counters"];
        assert_eq!(k["connection:connect:success"], 998);
        assert_eq!(k["connection:connect:fail"], 2);
        assert_eq!(k["connection:connect:reconnect"], 1);
        assert_eq!(k["message:sent"], 5000);
        assert_eq!(k["message:received"], 4);
        assert_eq!(k["message:sentSize"], 5000 * 2100);
        assert_eq!(k["message:sendSize"], 5000 * 2100);
        assert_eq!(k["message:recvSize"], 4 * 2100);
        assert_eq!(k["message:lt:100"], 1);
        assert_eq!(k["message:lt:200"], 1);
        assert_eq!(k["message:lt:1000"], 0);
        assert_eq!(k["message:ge:1000"], 2);
        assert_eq!(k["sendingStep"], 500);
        assert_eq!(k["epoch"], 2);
        assert_eq!(k["switchyard:v2:LessThan50ms"], 1);
        assert_eq!(k["switchyard:v2:LessThan200ms"], 1);
        assert_eq!(k["switchyard:v2:LessThan2s"], 1);
        assert_eq!(k["switchyard:v2:MoreThan5s"], 1);
        // Azure's own latency names are only the v1 ones.
        let names: Vec<&String> = k.as_object().unwrap().keys().collect();
        let lt: Vec<&&String> = names
            .iter()
            .filter(|n| n.starts_with("message:lt:"))
            .collect();
        assert_eq!(lt.len(), 10);
        assert!(line.starts_with(r#"{"Time":"2024-05-01T12:00:01Z","Counters":{"#));
    }

    #[test]
    fn utc_dates() {
        let at = |s: u64| utc_second(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_709_251_199), "2024-02-29T23:59:59Z");
        assert_eq!(at(4_102_444_800), "2100-01-01T00:00:00Z");
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_count(0), "0");
        assert_eq!(fmt_count(999), "999");
        assert_eq!(fmt_count(1000), "1,000");
        assert_eq!(fmt_count(1_234_567), "1,234,567");
        assert_eq!(fmt_number(2.0), "2");
        assert_eq!(fmt_number(0.5), "0.5");
        assert_eq!(fmt_number(0.004), "0");
        assert_eq!(fmt_number(12.26), "12.3");
        assert_eq!(fmt_number(1999.6), "2,000");
        assert_eq!(fmt_number(f64::NAN), "-");
        // The guide's own figures.
        assert_eq!(fmt_bandwidth(2.0 * 2048.0), "4 KBps");
        assert_eq!(fmt_bandwidth(200.0 * 2048.0), "400 KBps");
        assert_eq!(fmt_bandwidth(1000.0 * 2048.0), "2 MBps");
        assert_eq!(fmt_bandwidth(1_000_000.0 * 2048.0), "2,000 MBps");
        assert_eq!(fmt_bandwidth(500.0), "500 Bps");
        assert_eq!(fmt_memory_kb(87_347), "85.3 MB");
        assert_eq!(fmt_memory_kb(512), "512 KB");
    }

    /// The trimmed cells of the row named `name` (the name first).
    pub(crate) fn cells(table: &str, name: &str) -> Vec<String> {
        table
            .lines()
            .find(|l| l.starts_with(&format!("| {name} ")))
            .unwrap_or_else(|| panic!("no row {name} in\n{table}"))
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_string())
            .collect()
    }

    #[test]
    fn table_of_multi_step_run() {
        let r = multi_step();
        let t = table(&r);
        println!("{t}");
        let row = |name: &str| cells(&t, name);
        assert!(t.starts_with(
            "switchyard-bench 0.1.0: echo on switchyard (default mode), websockets + json\n"
        ));
        assert!(t.contains("1,000 connections, 2,048-byte messages every 1,000 ms"));
        assert_eq!(
            row("Echo"),
            ["Echo", "Step 1", "Step 2", "Step 3", "Step 4"]
        );
        assert_eq!(row("Connections")[1..], ["1,000"; 4]);
        assert_eq!(
            row("Sending connections")[1..],
            ["250", "500", "750", "1,000"]
        );
        assert_eq!(row("Inbound (messages/s)")[3], "750");
        // 250 senders × 2,048 bytes/s = 500 KBps; 1,000 × 2,048 = 2,000 KBps = 2 MBps.
        assert_eq!(row("Inbound bandwidth")[1], "500 KBps");
        assert_eq!(row("Outbound bandwidth")[4], "2 MBps");
        assert_eq!(row("Latency p50 (ms)")[1..], ["1.5", "3", "4.5", "6"]);
        assert_eq!(row("Latency p99 (ms)")[1], "12.3");
        assert_eq!(row("Latency p99 (ms)")[4], "49.2");
        assert_eq!(row("Latency max (ms)")[4], "2,500");
        assert_eq!(row("Deliveries ≥ 1 s or lost")[4], "10.00 %");
        assert_eq!(row("Deliveries ≥ 1 s or lost")[1], "0.00 %");
        assert_eq!(row("Lost / duplicated / reordered")[1], "0 / 0 / 0");
        assert_eq!(row("Connections failed")[1], "0");
        assert_eq!(row("Service CPU (cores)")[3], "0.75");
        assert_eq!(row("Service RSS")[3], "83 MB");
        assert_eq!(row("Service CPU µs/delivery")[1], "250");
        assert_eq!(row("App server CPU (cores)")[1], "0.50");
        assert_eq!(row("App server RSS")[1], "40 MB");
        assert_eq!(row("Azure rule")[1..], ["pass", "pass", "pass", "FAIL"]);
        assert!(t.contains(
            "Result: step 3 (750 sending connections: 750 inbound/s, 750 outbound/s) is the last \
             passing step; it equals or exceeds Azure Unit1 for this scenario."
        ));
        assert!(t.contains("Whole run: sent 75,000"));
        assert!(t.contains("max 2,500 ms; not every step passed."));
        // Every table line has the same number of columns and the same width.
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with('|')).collect();
        assert!(lines.iter().all(|l| l.matches('|').count() == 6));
        assert!(lines
            .iter()
            .all(|l| l.chars().count() == lines[0].chars().count()));
    }

    #[test]
    fn table_of_failing_run() {
        let mut r = multi_step();
        for s in &mut r.steps {
            s.passed = false;
        }
        r.last_passing_step = None;
        r.azure_unit = None;
        let t = table(&r);
        assert!(t.contains("Result: no step passed Azure's rule"), "{t}");
        assert!(!t.contains("equals or exceeds"));
    }

    #[test]
    fn table_of_single_step_and_stepless_runs() {
        let r = single_step();
        let t = table(&r);
        assert!(t
            .lines()
            .any(|l| l.starts_with("| Broadcast") && l.contains("Step 1")));
        assert!(t.contains("| Outbound (messages/s)"));
        assert!(t.contains("2,000"));
        assert!(t.contains("4 MBps"), "{t}");
        assert!(t.contains("messagepack"));
        assert!(t.contains("equals or exceeds Azure Unit1"));

        let mut bare = single_step();
        bare.steps.clear();
        bare.last_passing_step = None;
        bare.azure_unit = None;
        let t = table(&bare);
        assert!(
            t.lines()
                .any(|l| l.starts_with("| Broadcast") && l.contains("Run")),
            "{t}"
        );
        assert!(!t.contains("Sending connections"));
        assert!(t.contains("Result: the run passed; it does not reach any Azure unit"));
    }

    #[test]
    fn scenario_headings() {
        assert_eq!(scenario_heading("echo"), "Echo");
        assert_eq!(scenario_heading("send-to-group"), "Send to group");
        assert_eq!(scenario_heading("rest-broadcast"), "REST broadcast");
    }

    #[test]
    fn table_and_compare_of_a_cluster_run() {
        let redis = RedisUsage {
            seconds: 30.0,
            process: Some(usage(0.1, 8_192)),
            cpu_seconds: 3.0,
            net_input_bytes: 60_000 * 10,
            net_output_bytes: 60_000 * 20,
            commands: 60,
            publish_calls: 60,
            messages_sent: 60,
            cpu_us_per_message: Some(50_000.0),
            bytes_per_message: Some(30_000.0),
            publish_per_message: Some(1.0),
        };
        let mut r = single_step();
        r.steps[0].redis = Some(redis.clone());
        r.cluster = Some(Cluster {
            nodes: (1..=3)
                .map(|i| switchyard_capacity::report::NodeUsage {
                    name: format!("n{i}"),
                    url: format!("http://127.0.0.1:800{i}/"),
                    connections: 333,
                    process: Some(usage(0.2, 30_000)),
                    backplane_published: Some(if i == 1 { 60 } else { 0 }),
                    backplane_received: Some(60),
                })
                .collect(),
            rest_nodes: "n1".into(),
            redis: Some(redis),
        });
        let t = table(&r);
        assert_eq!(cells(&t, "PUBLISH per message sent")[1], "1");
        assert_eq!(cells(&t, "Redis CPU µs/message")[1], "50,000");
        assert_eq!(cells(&t, "Redis bytes/message")[1], "30,000");
        assert!(t.contains("Cluster: 3 nodes"), "{t}");
        assert!(t.contains("REST calls into n1"), "{t}");
        assert!(
            t.contains("n2 http://127.0.0.1:8002/: 333 connections"),
            "{t}"
        );
        assert!(t.contains("backplane published 0 received 60"), "{t}");
        assert!(t.contains("Per message sent: Redis CPU 50,000 µs, 30,000 bytes, 1 PUBLISH."));
        // A single-node report has no cluster rows; side by side, it shows "1" node.
        let single = single_step();
        assert!(!table(&single).contains("Redis"));
        let json = serde_json::to_string(&single).unwrap();
        assert!(
            !json.contains("cluster") && !json.contains("redis"),
            "{json}"
        );
        let t = compare_table(&[&r, &single]);
        assert_eq!(cells(&t, "Nodes (REST into)")[1..3], ["3 (n1)", "1"]);
        assert_eq!(cells(&t, "PUBLISH per message sent")[1..3], ["1", "-"]);
        let back: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn compare_two_runs() {
        let ours = multi_step();
        let mut peer = multi_step();
        peer.target = "go-signalr".into();
        peer.mode = "direct".into();
        peer.last_passing_step = Some(2);
        peer.azure_unit = None;
        for s in &mut peer.steps {
            s.passed = s.index <= 2;
            s.service = Some(usage(1.0, 163_840));
            s.service_cpu_us_per_delivery = Some(500.0);
        }
        let t = compare_table(&[&ours, &peer]);
        println!("{t}");
        let row = |name: &str| cells(&t, name);
        assert_eq!(
            row("")[1..],
            ["switchyard", "go-signalr", "switchyard ÷ go-signalr"]
        );
        assert_eq!(row("Scenario")[1..3], ["echo", "echo"]);
        assert_eq!(row("Mode")[1..3], ["default", "direct"]);
        assert_eq!(row("Connections")[1], "1,000");
        assert_eq!(
            row("Step shown")[1..3],
            ["3 of 4 (750 senders)", "2 of 4 (500 senders)"]
        );
        // 750 ÷ 500.
        assert_eq!(row("Inbound (messages/s)")[1..], ["750", "500", "1.50×"]);
        assert_eq!(row("Outbound (messages/s)")[3], "1.50×");
        assert_eq!(row("Outbound bandwidth")[3], "1.50×");
        assert_eq!(row("Latency p50 (ms)")[1..], ["4.5", "3", ""]);
        // 83 MB ÷ 160 MB; 0.75 ÷ 1 core; 250 ÷ 500 µs.
        assert_eq!(row("Service RSS")[1..], ["83 MB", "160 MB", "0.52×"]);
        assert_eq!(row("Service CPU (cores)")[3], "0.75×");
        assert_eq!(row("Service CPU µs/delivery")[3], "0.50×");
        assert_eq!(row("Azure unit reached")[1..3], ["Unit1", "-"]);
        assert_eq!(row("Run passed")[1..3], ["no", "no"]);
    }

    #[test]
    fn compare_many_and_failed_runs() {
        let a = multi_step();
        let mut b = multi_step();
        b.last_passing_step = None;
        let c = single_step();
        let t = compare_table(&[&a, &b, &c]);
        assert!(!t.contains('×'));
        assert!(t.contains("switchyard #1"));
        assert!(t.contains("switchyard #3"));
        assert!(t.contains("none passed; 4 of 4 (1,000 senders)"));
        assert_eq!(compare_table(&[]), "No reports to compare.\n");
    }
}
