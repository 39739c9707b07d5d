//! What a bench run shows a person and what it writes for other tools.
//!
//! # Layout
//! - [`table`]: one run as a text table laid out like the tables of Microsoft's "Performance
//!   guide for Azure SignalR Service" (one column per step), plus our own rows (latency
//!   percentiles, lost/duplicated/reordered, CPU and memory of the service and the app
//!   server) and a closing result line.
//! - [`compare_table`]: several runs side by side (Switchyard against a peer).
//! - [`LiveCounters`] / [`counters_line`]: the per-second JSON lines that Azure's own SignalR
//!   benchmark tool writes, so its scripts can read ours (see [`counters_line`] for the
//!   layout and where it comes from).
//! - [`latency_buckets`] / [`latency`]: an HDR histogram of delivery latencies turned into the
//!   report's `Latency`; [`histogram_to_base64`] / [`histogram_from_base64`]: HdrHistogram V2
//!   encoding (no deflate) for shipping a histogram from a load-generator process to the one
//!   that reports.
//!
//! Numbers, bandwidths (the guide's `KBps` and `MBps`, 1 KB = 1,024 bytes and 1 MB = 1,000 KB)
//! and memory are written by [`switchyard_capacity::format`], as `switchyard capacity` writes
//! them.

mod compare;
mod counters;
#[cfg(test)]
pub(crate) mod fixtures;
mod histogram;
mod table;

pub use compare::compare_table;
pub(crate) use compare::run_labels;
pub use counters::{counters_line, LiveCounters};
pub use histogram::{
    bucket_names_v1, bucket_names_v2, bucket_v1, bucket_v2, histogram_from_base64,
    histogram_to_base64, latency, latency_buckets, share_over_1s, Buckets, BUCKETS_V1_MS,
    BUCKETS_V2_MS,
};
pub use table::{describe, result_line, table};
pub(crate) use table::{last_passing, scenario_heading};

/// `total` per second over `seconds`; NaN (printed as `-`) without a duration.
fn per_second(total: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        total as f64 / seconds
    } else {
        f64::NAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fixtures::{cells, single_step, usage};
    use switchyard_capacity::report::{Cluster, RedisUsage, Report};

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
}
