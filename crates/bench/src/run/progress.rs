//! The live view on stderr while a run goes on.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::scenario::Plan;
use crate::stats::{Bucket, Live};
use crate::worker::now_ms;

/// The live view on stderr (hidden with --quiet or when stderr is not a terminal).
pub(super) struct Progress {
    bar: ProgressBar,
}

impl Progress {
    pub(super) fn new(quiet: bool, connections: u64) -> Progress {
        let bar = ProgressBar::with_draw_target(
            Some(connections),
            if quiet {
                ProgressDrawTarget::hidden()
            } else {
                ProgressDrawTarget::stderr()
            },
        );
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} {msg}")
                .expect("template")
                .progress_chars("=> "),
        );
        bar.set_prefix("connecting");
        Progress { bar }
    }

    pub(super) fn connecting(&self, live: &Live) {
        self.bar.set_position(live.connected + live.connect_failed);
        if live.connect_failed > 0 {
            self.bar
                .set_message(format!("{} failed", live.connect_failed));
        }
    }

    pub(super) fn connected(&self, connected: u64, failed: u64, seconds: f64) {
        self.bar.println(format!(
            "connected {connected} ({failed} failed) in {seconds:.1} s"
        ));
    }

    pub(super) fn sending(&self, seconds: f64) {
        self.bar.set_length(seconds.ceil() as u64);
        self.bar.set_position(0);
        self.bar.set_prefix("sending");
        self.bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:30}] {pos}/{len} s {msg}")
                .expect("template")
                .progress_chars("=> "),
        );
    }

    pub(super) fn tick(
        &self,
        elapsed: f64,
        live: &Live,
        plan: &Plan,
        measure_ms: f64,
        step_ms: f64,
    ) {
        self.bar.set_position(elapsed.max(0.0) as u64);
        let now = now_ms();
        let step = match current_step(now, measure_ms, step_ms, plan.steps.max(1)) {
            0 => "warm-up".to_owned(),
            s => format!(
                "step {s}/{} ({} senders)",
                plan.steps.max(1),
                plan.senders_at(s)
            ),
        };
        let slow: u64 = live.buckets_v1.last().copied().unwrap_or(0);
        self.bar.set_message(format!(
            "{step} sent {} received {} ≥1s {slow} dropped {}",
            live.sent, live.received, live.dropped
        ));
    }

    pub(super) fn step_done(&self, index: u64, steps: u32, bucket: &Bucket, passed: bool) {
        let ms = |q: f64| bucket.latency.value_at_quantile(q) as f64 / 1000.0;
        self.bar.println(format!(
            "step {index}/{steps}: sent {} expected {} received {} p50 {:.1} ms p99 {:.1} ms max {:.1} ms — {}",
            bucket.sent,
            bucket.expected,
            bucket.received,
            ms(0.5),
            ms(0.99),
            bucket.latency.max() as f64 / 1000.0,
            if passed { "pass" } else { "FAIL (Azure's rule)" }
        ));
    }

    pub(super) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// The 1-based step running at `now` (0 during the warm-up; the last after the end).
pub(super) fn current_step(now: f64, measure_ms: f64, step_ms: f64, steps: u32) -> u32 {
    if now < measure_ms {
        0
    } else {
        (((now - measure_ms) / step_ms) as u32 + 1).min(steps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_by_time() {
        assert_eq!(current_step(0.0, 10.0, 100.0, 3), 0);
        assert_eq!(current_step(10.0, 10.0, 100.0, 3), 1);
        assert_eq!(current_step(110.0, 10.0, 100.0, 3), 2);
        assert_eq!(current_step(1e9, 10.0, 100.0, 3), 3);
    }
}
