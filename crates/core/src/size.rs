//! Byte sizes written for people: `2048`, `64KiB`, `1.5MB`, `16 MiB`.
//!
//! Units are binary whatever their spelling: `K`/`KB`/`KiB` = 1,024 bytes, `M`/`MB`/`MiB` =
//! 1,048,576, `G`/`GB`/`GiB` = 1,073,741,824 (letter case ignored). Memory limits and message
//! sizes are powers of two in every SignalR implementation, and Azure's performance guide
//! (which `switchyard capacity` follows) counts 1 KB as 1,024 bytes, so one reading serves
//! both; a decimal `KB` beside a binary `KiB` would make `1MB` and `1MiB` differ by 5 %.

/// Bytes in `text`, or `None` when it is not a size. Decimals are allowed when they give a
/// whole number of bytes (`1.5KB`, not `0.3`); `_` may separate digits (`1_048_576`).
pub fn parse_size(text: &str) -> Option<u64> {
    let raw = text.trim();
    let split = raw
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(raw.len());
    let (number, unit) = raw.split_at(split);
    let digits = number.replace('_', "");
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    // Whole numbers exactly (f64 would round above 2^53); decimals through f64.
    if let Ok(whole) = digits.parse::<u64>() {
        return whole.checked_mul(scale);
    }
    let number: f64 = digits.parse().ok()?;
    let bytes = number * scale as f64;
    // `u64::MAX as f64` rounds up to 2^64, so `<` keeps the cast below exact.
    (bytes.is_finite() && bytes.fract() == 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn binary_units_in_any_spelling() {
        for (text, bytes) in [
            ("2048", 2_048),
            ("1_048_576", 1_048_576),
            ("2KB", 2_048),
            ("2 KiB", 2_048),
            ("64kib", 65_536),
            ("1.5k", 1_536),
            ("1MB", 1_048_576),
            ("16 MiB", 16 << 20),
            ("1GB", 1 << 30),
            ("512B", 512),
            ("0", 0),
        ] {
            assert_eq!(parse_size(text), Some(bytes), "{text}");
        }
        for text in [
            "",
            "0.3",
            "1XB",
            "MB",
            "-1",
            "1e3",
            ".",
            "inf",
            "18446744073709551616",
        ] {
            assert_eq!(parse_size(text), None, "{text}");
        }
        assert_eq!(parse_size("17179869184GB"), None, "overflow");
    }
}
