//! Numbers as `switchyard-bench` and `switchyard capacity` print them, so a rate or a
//! bandwidth reads the same in a benchmark report and in a capacity plan.
//!
//! Bandwidth is written the way Azure's performance guide writes it: `KBps` and `MBps`, with
//! 1 KB = 1,024 bytes and 1 MB = 1,000 KB (the guide's "4 KBps" for 2 × 2,048 bytes/s and
//! "2 MBps" for 1,000 × 2,048; see [`crate::guide`]).

use crate::guide;

/// What a missing or unprintable value shows as.
pub const NONE: &str = "-";

/// `1234567` → `1,234,567`.
pub fn count(n: u64) -> String {
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
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return NONE.into();
    }
    let sign = if v < 0.0 { "-" } else { "" };
    let a = v.abs();
    if a >= 99.95 {
        return format!("{sign}{}", count(a.round() as u64));
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

/// Bytes per second in the guide's units: `512 Bps`, `4 KBps`, `2 MBps`, `2,000 MBps`.
pub fn bandwidth(bytes_per_s: f64) -> String {
    if !bytes_per_s.is_finite() || bytes_per_s < 0.0 {
        return NONE.into();
    }
    let (k, m) = (guide::KB as f64, guide::MB as f64);
    if bytes_per_s < k {
        format!("{} Bps", number(bytes_per_s))
    } else if bytes_per_s < m {
        format!("{} KBps", number(bytes_per_s / k))
    } else {
        format!("{} MBps", number(bytes_per_s / m))
    }
}

/// A resident set size given in KiB: `812 KB`, `85.3 MB`, `1.21 GB`.
pub fn memory_kb(kb: u64) -> String {
    let kb = kb as f64;
    if kb < 1024.0 {
        format!("{} KB", number(kb))
    } else if kb < 1024.0 * 1024.0 {
        format!("{} MB", number(kb / 1024.0))
    } else {
        format!("{} GB", number(kb / (1024.0 * 1024.0)))
    }
}

/// CPU cores with two decimals (`0.42`).
pub fn cores(cores: f64) -> String {
    if cores.is_finite() {
        format!("{cores:.2}")
    } else {
        NONE.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(number(2.0), "2");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(0.004), "0");
        assert_eq!(number(12.26), "12.3");
        assert_eq!(number(1999.6), "2,000");
        assert_eq!(number(f64::NAN), "-");
        // The guide's own figures.
        assert_eq!(bandwidth(2.0 * 2048.0), "4 KBps");
        assert_eq!(bandwidth(200.0 * 2048.0), "400 KBps");
        assert_eq!(bandwidth(1000.0 * 2048.0), "2 MBps");
        assert_eq!(bandwidth(1_000_000.0 * 2048.0), "2,000 MBps");
        assert_eq!(bandwidth(500.0), "500 Bps");
        assert_eq!(memory_kb(87_347), "85.3 MB");
        assert_eq!(memory_kb(512), "512 KB");
    }

    #[test]
    fn edges() {
        assert_eq!(number(0.42), "0.42");
        assert_eq!(number(99.96), "100");
        assert_eq!(number(12_345.6), "12,346");
        assert_eq!(number(-3.5), "-3.5");
        assert_eq!(bandwidth(1_228_800.0), "1.2 MBps");
        assert_eq!(bandwidth(20_480_000.0), "20 MBps");
        assert_eq!(bandwidth(-1.0), "-");
        assert_eq!(memory_kb(1_268_777), "1.21 GB");
        assert_eq!(cores(0.4199), "0.42");
        assert_eq!(cores(f64::INFINITY), "-");
    }
}
