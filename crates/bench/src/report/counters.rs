//! Azure's bench-tool counters: the per-second JSON lines its scripts read, written from a
//! load generator's running totals.

use std::time::{SystemTime, UNIX_EPOCH};

use super::histogram::{bucket_names_v1, V2_CLASS_NAMES};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::histogram::{bucket_v1, bucket_v2};
    use std::time::Duration;

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
}
