//! Loads written as text: `scenario=broadcast,connections=5000,senders=2,message-size=1KB,send-interval=500ms`.
//!
//! Keys (`_` may stand for `-`):
//! - `scenario` (required): `echo`, `broadcast`, `send-to-group`, `send-to-connection`,
//!   `rest-broadcast`, `rest-send-to-user`;
//! - `connections` (required): client connections held;
//! - `senders`: connections (REST callers for REST scenarios) sending one message per interval
//!   [default: every connection; required for broadcast and rest-broadcast];
//! - `message-size`: bytes, or with `B`, `KB`/`KiB`/`K` (1,024), `MB`/`MiB`/`M` (1,048,576)
//!   [default: 2KB, the guide's];
//! - `send-interval`: with `ms`, `s`, `m`/`min` or `h`, decimals allowed (`0.5s`) [default: 1s];
//! - `group-size`: members per group (send-to-group);
//! - `groups`: number of groups (send-to-group); without `group-size`, groups of connections /
//!   groups members.

use crate::guide;
use crate::plan::Load;
use crate::scenario::Scenario;

/// A load being described; [`LoadSpec::build`] applies defaults and checks it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoadSpec {
    pub scenario: Option<Scenario>,
    pub connections: Option<u64>,
    pub senders: Option<u64>,
    pub message_size: Option<u64>,
    pub send_interval_ms: Option<f64>,
    pub group_size: Option<u64>,
    pub groups: Option<u64>,
}

impl LoadSpec {
    /// Parses `key=value,key=value,…`.
    pub fn parse(text: &str) -> Result<LoadSpec, String> {
        let mut spec = LoadSpec::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("expected key=value, got '{part}'"))?;
            let key = key.trim().replace('_', "-");
            let value = value.trim();
            let slot_taken = match key.as_str() {
                "scenario" => spec.scenario.replace(parse_scenario(value)?).is_some(),
                "connections" => spec
                    .connections
                    .replace(parse_count(&key, value)?)
                    .is_some(),
                "senders" => spec.senders.replace(parse_count(&key, value)?).is_some(),
                "message-size" => spec.message_size.replace(parse_size(value)?).is_some(),
                "send-interval" => spec
                    .send_interval_ms
                    .replace(parse_interval_ms(value)?)
                    .is_some(),
                "group-size" => spec.group_size.replace(parse_count(&key, value)?).is_some(),
                "groups" => spec.groups.replace(parse_count(&key, value)?).is_some(),
                _ => {
                    return Err(format!(
                        "unknown key '{key}' (expected scenario, connections, senders, \
                         message-size, send-interval, group-size, groups)"
                    ))
                }
            };
            if slot_taken {
                return Err(format!("'{key}' given twice"));
            }
        }
        Ok(spec)
    }

    /// Applies the defaults and checks the load.
    pub fn build(&self) -> Result<Load, String> {
        let scenario = self.scenario.ok_or("a load needs scenario=…")?;
        let name = scenario.name();
        let connections = self
            .connections
            .ok_or_else(|| format!("{name}: a load needs connections=N"))?;
        let senders = match (self.senders, scenario.is_broadcast()) {
            (Some(senders), _) => senders,
            (None, false) => connections,
            (None, true) => {
                return Err(format!(
                    "{name}: needs senders (how many connections broadcast; the guide's runs \
                     send 2 broadcasts per second)"
                ))
            }
        };
        let group_size = match (scenario, self.group_size, self.groups) {
            (Scenario::SendToGroup, Some(size), _) => Some(size),
            (Scenario::SendToGroup, None, Some(0)) => {
                return Err(format!("{name}: groups must be at least 1"))
            }
            (Scenario::SendToGroup, None, Some(groups)) => Some((connections / groups).max(1)),
            (Scenario::SendToGroup, None, None) => {
                return Err(format!(
                    "{name}: needs group-size (members per group) or groups (number of groups)"
                ))
            }
            (_, size, _) => size,
        };
        let load = Load {
            scenario,
            connections,
            senders,
            message_size: self.message_size.unwrap_or(guide::MESSAGE_SIZE),
            send_interval_ms: self
                .send_interval_ms
                .unwrap_or(guide::SEND_INTERVAL_MS as f64),
            group_size,
            groups: self.groups,
        };
        load.validate()?;
        Ok(load)
    }
}

/// One of the planned scenarios' names ([`Scenario::PLANNED`]).
pub fn parse_scenario(text: &str) -> Result<Scenario, String> {
    let names: Vec<&str> = Scenario::PLANNED.iter().map(|s| s.name()).collect();
    match Scenario::from_name(text.trim()) {
        Some(scenario) if scenario.is_planned() => Ok(scenario),
        Some(scenario) => Err(format!(
            "{}: Azure's performance guide publishes no figures for it (expected one of {})",
            scenario.name(),
            names.join(", ")
        )),
        None => Err(format!(
            "unknown scenario '{}' (expected one of {})",
            text.trim(),
            names.join(", ")
        )),
    }
}

/// A whole number; `_` separators allowed (`100_000`).
pub fn parse_count(what: &str, text: &str) -> Result<u64, String> {
    let digits = text.trim().replace('_', "");
    digits
        .parse::<u64>()
        .map_err(|_| format!("{what}: expected a whole number, got '{}'", text.trim()))
}

/// Bytes: `2048`, `2KB`, `2KiB`, `2k`, `1.5MB`, `512B` (binary units, as the guide counts;
/// the reading is `switchyard_core::size`'s, shared with the service's size settings).
pub fn parse_size(text: &str) -> Result<u64, String> {
    switchyard_core::size::parse_size(text).ok_or_else(|| {
        format!(
            "message-size: expected bytes such as 2048, 2KB or 1MB, got '{}'",
            text.trim()
        )
    })
}

/// A duration in milliseconds: `500ms`, `1s`, `0.5s`, `2m`, `1min`, `1h`.
pub fn parse_interval_ms(text: &str) -> Result<f64, String> {
    let raw = text.trim();
    let error =
        || format!("send-interval: expected a duration such as 1s, 500ms or 0.5s, got '{raw}'");
    let split = raw
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(error)?;
    let (number, unit) = raw.split_at(split);
    let number: f64 = number.parse().map_err(|_| error())?;
    let scale = match unit.trim() {
        "ms" => 1.0,
        "s" => 1_000.0,
        "m" | "min" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return Err(error()),
    };
    let ms = number * scale;
    if !(ms.is_finite() && ms > 0.0) {
        return Err(format!("send-interval: must be more than 0, got '{raw}'"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_spec() {
        let load = LoadSpec::parse(
            "scenario=broadcast, connections=5_000,senders=2,message_size=1KB,send-interval=500ms",
        )
        .unwrap()
        .build()
        .unwrap();
        assert_eq!(load.scenario, Scenario::Broadcast);
        assert_eq!(load.connections, 5_000);
        assert_eq!(load.senders, 2);
        assert_eq!(load.message_size, 1_024);
        assert_eq!(load.send_interval_ms, 500.0);
    }

    #[test]
    fn defaults() {
        let load = LoadSpec::parse("scenario=echo,connections=10")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(load, Load::new(Scenario::Echo, 10));
        let load = LoadSpec::parse("scenario=send-to-group,connections=1000,groups=10")
            .unwrap()
            .build()
            .unwrap();
        assert_eq!(load.group_size, Some(100));
        assert_eq!(load.groups, Some(10));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let err = |text: &str| match LoadSpec::parse(text) {
            Err(e) => e,
            Ok(spec) => spec.build().unwrap_err(),
        };
        assert!(err("scenario=chat,connections=1").contains("unknown scenario 'chat'"));
        assert!(err("scenario=echo,connections=lots").contains("connections: expected a whole"));
        assert!(err("scenario=echo").contains("connections=N"));
        assert!(err("connections=4").contains("scenario="));
        assert!(err("scenario=echo,connections=4,colour=red").contains("unknown key 'colour'"));
        assert!(err("scenario=echo,scenario=echo,connections=4").contains("twice"));
        assert!(err("scenario=broadcast,connections=4").contains("needs senders"));
        assert!(err("scenario=send-to-group,connections=4").contains("needs group-size"));
        assert!(err("scenario=echo,connections=4,group-size=2").contains("send-to-group"));
        assert!(err("scenario=echo,connections=4,senders=5").contains("exceed"));
        assert!(err("scenario=echo,connections=4,send-interval=5").contains("send-interval"));
        assert!(err("scenario=echo,connections=4,message-size=2XB").contains("message-size"));
        assert!(err("scenario=echo connections=4").contains("unknown scenario"));
    }

    #[test]
    fn scenarios_without_figures_are_named() {
        let e = parse_scenario("rest-chat-room").unwrap_err();
        assert!(
            e.starts_with("rest-chat-room: Azure's performance guide publishes no figures"),
            "{e}"
        );
        assert!(e.contains("expected one of echo, broadcast"), "{e}");
        assert_eq!(parse_scenario(" echo "), Ok(Scenario::Echo));
    }

    #[test]
    fn sizes_and_intervals() {
        assert_eq!(parse_size("2048").unwrap(), 2_048);
        assert_eq!(parse_size("2KB").unwrap(), 2_048);
        assert_eq!(parse_size("2 KiB").unwrap(), 2_048);
        assert_eq!(parse_size("1.5k").unwrap(), 1_536);
        assert_eq!(parse_size("1MB").unwrap(), 1_048_576);
        assert_eq!(parse_size("512B").unwrap(), 512);
        assert!(parse_size("0.3").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(parse_interval_ms("500ms").unwrap(), 500.0);
        assert_eq!(parse_interval_ms("0.5s").unwrap(), 500.0);
        assert_eq!(parse_interval_ms("2m").unwrap(), 120_000.0);
        assert_eq!(parse_interval_ms("1min").unwrap(), 60_000.0);
        assert!(parse_interval_ms("0s").is_err());
        assert!(parse_interval_ms("1d").is_err());
        assert!(parse_interval_ms("s").is_err());
    }
}
