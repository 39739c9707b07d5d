//! Wall-clock time as the protocols write it.

/// Seconds since the Unix epoch (token `exp`/`nbf`, `asrs.s.coae`); 0 if the clock is before it.
pub fn unix_now() -> i64 {
    unix_now_ms() / 1000
}

/// Milliseconds since the Unix epoch (the service protocol's `servers` ping).
pub fn unix_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
