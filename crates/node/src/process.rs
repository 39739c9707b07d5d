//! This process's CPU and memory, sampled once a second by the node's heartbeat: Azure's
//! "Server Load", for `/metrics` and anything else that wants it (a dashboard, `/api/health`).
//! Linux only (`/proc/self`); elsewhere every sample reads zero.

use std::time::Instant;

use parking_lot::Mutex;

/// The latest sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessSample {
    /// CPU used over the last interval, as a percentage of all the cores this process may run
    /// on (0–100): 100 means every core busy with this process.
    pub cpu_percent: f64,
    /// Resident memory, in bytes.
    pub rss_bytes: u64,
    /// CPU time used since the process started, in seconds.
    pub cpu_seconds: f64,
}

/// `/proc/self/stat` counts CPU time in clock ticks of `sysconf(_SC_CLK_TCK)`, which the
/// kernel fixes at 100 for user space on every architecture Linux runs on.
const TICKS_PER_SECOND: f64 = 100.0;
/// `/proc/self/statm` counts pages; 4 KiB on the platforms this runs on (x86-64, aarch64
/// with 4 KiB pages). Read from the auxiliary vector it would need unsafe code.
const PAGE_SIZE: u64 = 4096;

struct State {
    sample: ProcessSample,
    /// The CPU seconds and time of the previous reading, for the next interval's percentage.
    last: Option<(f64, Instant)>,
}

static STATE: Mutex<State> = Mutex::new(State {
    sample: ProcessSample {
        cpu_percent: 0.0,
        rss_bytes: 0,
        cpu_seconds: 0.0,
    },
    last: None,
});

/// The latest sample (all zero until the first [`update`]).
pub fn sample() -> ProcessSample {
    STATE.lock().sample
}

/// Reads `/proc/self` and makes that the latest sample. Called every second by the node's
/// heartbeat; calls closer together than half a second (several nodes in one test process)
/// leave the sample as it is, so each interval stays long enough to mean something.
pub fn update() {
    update_at(Instant::now());
}

fn update_at(now: Instant) {
    let mut state = STATE.lock();
    if let Some((_, at)) = state.last {
        if now.duration_since(at).as_secs_f64() < 0.5 {
            return;
        }
    }
    let cpu_seconds = read_cpu_seconds().unwrap_or(0.0);
    let rss_bytes = read_rss_bytes().unwrap_or(0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let cpu_percent = match state.last {
        Some((before, at)) => {
            let elapsed = now.duration_since(at).as_secs_f64();
            ((cpu_seconds - before) / elapsed / cores * 100.0).clamp(0.0, 100.0)
        }
        None => 0.0,
    };
    state.sample = ProcessSample {
        cpu_percent,
        rss_bytes,
        cpu_seconds,
    };
    state.last = Some((cpu_seconds, now));
}

/// utime + stime of the whole process (all threads), in seconds.
fn read_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    parse_cpu_ticks(&stat).map(|ticks| ticks as f64 / TICKS_PER_SECOND)
}

/// Fields 14 and 15 (utime, stime) of a `/proc/PID/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so counting starts after its last `)`.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // `rest` starts at field 3 (state): utime is the 12th field from here.
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

fn read_rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(pages * PAGE_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_past_an_awkward_command_name() {
        let line = "1234 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 8 0 100 0 0";
        assert_eq!(parse_cpu_ticks(line), Some(300));
        assert_eq!(parse_cpu_ticks("1234 (x) S 1 2"), None);
    }

    #[test]
    fn samples_this_process() {
        update_at(Instant::now());
        // Burn some CPU so the next interval has something to show.
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed().as_millis() < 600 {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        update_at(Instant::now());
        let sample = sample();
        if cfg!(target_os = "linux") {
            assert!(sample.rss_bytes > 1 << 20, "{sample:?}");
            assert!(sample.cpu_seconds > 0.0, "{sample:?}");
        }
        // Another test's node may have taken the latest interval: only the range is certain.
        assert!(sample.cpu_percent <= 100.0);
    }
}
