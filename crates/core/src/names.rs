//! Validated names. Each is an `Arc<str>` so clones on the routing path are refcounts.

use std::fmt;
use std::sync::Arc;

/// A name that failed validation; the message names the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} '{value}': {rule}")]
pub struct NameError {
    pub kind: &'static str,
    pub value: String,
    pub rule: &'static str,
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(Arc<str>);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

name_type!(
    /// Hub name as the service keys it: lower-cased, `{application}_{hub}` when an application is given.
    HubName
);
name_type!(
    /// Group name: 1–1024 characters, not all white space.
    GroupName
);
name_type!(
    /// User id: 1–1024 characters.
    UserId
);
name_type!(
    /// Public connection id (what hubs and REST callers see).
    ConnectionId
);

const MAX_HUB_LEN: usize = 128;
const MAX_GROUP_LEN: usize = 1024;
const MAX_USER_LEN: usize = 1024;
const MAX_CONNECTION_ID_LEN: usize = 1024;

fn error(kind: &'static str, value: &str, rule: &'static str) -> NameError {
    let mut shown: String = value.chars().take(64).collect();
    if shown.len() < value.len() {
        shown.push('…');
    }
    NameError {
        kind,
        value: shown,
        rule,
    }
}

fn is_hub_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '`' | ',' | '.' | '[' | ']')
}

/// Checks the Azure REST rule for hub and application names:
/// a letter, then up to 127 letters, digits or one of `` _`,.[] ``.
fn check_hub_like(kind: &'static str, value: &str) -> Result<(), NameError> {
    let mut chars = value.chars();
    match chars.next() {
        None => return Err(error(kind, value, "must not be empty")),
        Some(c) if !c.is_ascii_alphabetic() => {
            return Err(error(kind, value, "must start with a letter"))
        }
        _ => {}
    }
    if value.len() > MAX_HUB_LEN {
        return Err(error(kind, value, "must be at most 128 characters"));
    }
    if !chars.all(is_hub_char) {
        return Err(error(
            kind,
            value,
            "may contain only letters, digits and _ ` , . [ ]",
        ));
    }
    Ok(())
}

impl HubName {
    /// Validates `hub` (and `application`, when given) and builds the lower-cased key
    /// `{application}_{hub}` that Azure uses internally.
    pub fn new(hub: &str, application: Option<&str>) -> Result<Self, NameError> {
        check_hub_like("hub", hub)?;
        let key = match application.filter(|a| !a.is_empty()) {
            Some(app) => {
                check_hub_like("application", app)?;
                format!("{}_{}", app.to_ascii_lowercase(), hub.to_ascii_lowercase())
            }
            None => hub.to_ascii_lowercase(),
        };
        Ok(HubName(key.into()))
    }

    /// Rebuilds a name from its key (`{application}_{hub}`, lower case), as another node sent
    /// it. The key must look like one `new` makes.
    pub fn from_key(key: &str) -> Result<Self, NameError> {
        if key.is_empty() || key.len() > 2 * MAX_HUB_LEN + 1 {
            return Err(error("hub key", key, "must be 1 to 257 characters"));
        }
        if !key
            .chars()
            .all(|c| is_hub_char(c) && !c.is_ascii_uppercase())
        {
            return Err(error("hub key", key, "must be a lower-case hub key"));
        }
        Ok(HubName(key.into()))
    }
}

impl GroupName {
    pub fn new(value: &str) -> Result<Self, NameError> {
        if value.is_empty() {
            return Err(error("group", value, "must not be empty"));
        }
        if value.chars().count() > MAX_GROUP_LEN {
            return Err(error("group", value, "must be at most 1024 characters"));
        }
        if value.trim().is_empty() {
            return Err(error("group", value, "must not be only white space"));
        }
        Ok(GroupName(value.into()))
    }
}

impl UserId {
    pub fn new(value: &str) -> Result<Self, NameError> {
        if value.is_empty() {
            return Err(error("user", value, "must not be empty"));
        }
        if value.chars().count() > MAX_USER_LEN {
            return Err(error("user", value, "must be at most 1024 characters"));
        }
        Ok(UserId(value.into()))
    }
}

impl ConnectionId {
    pub fn new(value: &str) -> Result<Self, NameError> {
        if value.is_empty() {
            return Err(error("connection id", value, "must not be empty"));
        }
        if value.len() > MAX_CONNECTION_ID_LEN {
            return Err(error(
                "connection id",
                value,
                "must be at most 1024 characters",
            ));
        }
        Ok(ConnectionId(value.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_rules() {
        assert_eq!(HubName::new("Chat", None).unwrap().as_str(), "chat");
        assert_eq!(
            HubName::new("Chat", Some("App")).unwrap().as_str(),
            "app_chat"
        );
        assert!(HubName::new("1chat", None).is_err());
        assert!(HubName::new("", None).is_err());
        assert!(HubName::new("chat/../x", None).is_err());
        assert!(HubName::new(&"a".repeat(128), None).is_ok());
        assert!(HubName::new(&"a".repeat(129), None).is_err());
        assert!(HubName::new("a_b`c,d.e[f]", None).is_ok());
    }

    #[test]
    fn group_and_user_rules() {
        assert!(GroupName::new(" ").is_err());
        assert!(GroupName::new("").is_err());
        assert!(GroupName::new(&"g".repeat(1024)).is_ok());
        assert!(GroupName::new(&"g".repeat(1025)).is_err());
        assert!(GroupName::new("a b/c").is_ok());
        assert!(UserId::new("").is_err());
        assert!(UserId::new("user@x").is_ok());
    }
}
