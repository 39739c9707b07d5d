//! CPU time and memory of a process from `/proc` (Linux), and finding the process that
//! listens on a local TCP port.

use switchyard_capacity::report::ProcessUsage;

/// `sysconf(_SC_CLK_TCK)`: 100 on every Linux this runs on (x86-64, aarch64).
const CLOCK_TICKS: f64 = 100.0;

/// A reading of one process at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub pid: u32,
    pub at: std::time::Instant,
    /// utime + stime, seconds.
    pub cpu_seconds: f64,
    /// stime, seconds.
    pub system_seconds: f64,
    pub rss_kb: u64,
    pub hwm_kb: u64,
}

/// Reads `/proc/PID/stat` and `/proc/PID/status`; `None` if the process is gone.
pub fn sample(pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some(Sample {
        pid,
        at: std::time::Instant::now(),
        cpu_seconds: (utime + stime) as f64 / CLOCK_TICKS,
        system_seconds: stime as f64 / CLOCK_TICKS,
        rss_kb: field("VmRSS:")?,
        hwm_kb: field("VmHWM:")?,
    })
}

/// One reading of several processes, summed (`None` if any is gone); `pid` is the first's.
pub fn sample_sum(pids: &[u32]) -> Option<Sample> {
    let mut pids = pids.iter();
    let mut sum = sample(*pids.next()?)?;
    for &pid in pids {
        let one = sample(pid)?;
        sum.cpu_seconds += one.cpu_seconds;
        sum.system_seconds += one.system_seconds;
        sum.rss_kb += one.rss_kb;
        sum.hwm_kb += one.hwm_kb;
    }
    Some(sum)
}

/// Usage between two samples of the same process.
pub fn usage(before: &Sample, after: &Sample) -> ProcessUsage {
    let cpu_seconds = (after.cpu_seconds - before.cpu_seconds).max(0.0);
    let system_seconds = (after.system_seconds - before.system_seconds).clamp(0.0, cpu_seconds);
    let window = after.at.duration_since(before.at).as_secs_f64();
    ProcessUsage {
        pid: after.pid,
        cpu_seconds,
        system_seconds,
        cores: if window > 0.0 {
            cpu_seconds / window
        } else {
            0.0
        },
        rss_kb: after.rss_kb,
        hwm_kb: after.hwm_kb,
    }
}

/// The process listening on local TCP `port` (IPv4 or IPv6), if this user can see it.
pub fn listener_pid(port: u16) -> Option<u32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address is HEX_IP:HEX_PORT; state 0A = LISTEN; inode is field 9.
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let Some((_, hex_port)) = local.rsplit_once(':') else {
                continue;
            };
            if *state == "0A" && u16::from_str_radix(hex_port, 16).ok() == Some(port) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return None;
    }
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path()) {
                if inodes.iter().any(|i| target.as_os_str() == i.as_str()) {
                    return Some(pid);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_this_process() {
        let s = sample(std::process::id()).expect("own /proc");
        assert!(s.rss_kb > 0 && s.hwm_kb >= s.rss_kb);
        let later = sample(std::process::id()).unwrap();
        let u = usage(&s, &later);
        assert!(u.cpu_seconds >= 0.0);
        assert!(sample(u32::MAX).is_none());
    }

    #[test]
    fn finds_own_listener() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(listener_pid(port), Some(std::process::id()));
        drop(listener);
    }
}
