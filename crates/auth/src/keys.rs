//! Access keys and random connection tokens.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::RngCore as _;

/// The fixed access key of the Azure SignalR Local Emulator (spec §6).
///
/// Anyone can sign tokens with it; use it only for local development.
pub const EMULATOR_ACCESS_KEY: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH";

/// The access keys a Switchyard instance accepts: a primary key and an
/// optional secondary key (for rotation).
///
/// A key is used as the HMAC secret **as written**: the UTF-8 bytes of the
/// string, never base64-decoded (spec §3).
///
/// Empty keys are never used: an empty secondary is dropped by [`AccessKeys::new`]
/// and an empty primary is skipped by [`AccessKeys::all`], so nothing can be
/// verified against an empty HMAC secret.
///
/// `Debug` does not print the keys.
#[derive(Clone, PartialEq, Eq)]
pub struct AccessKeys {
    primary: String,
    secondary: Option<String>,
}

impl AccessKeys {
    /// Keys from a primary and an optional secondary key. An empty secondary
    /// key is treated as absent.
    pub fn new(primary: String, secondary: Option<String>) -> Self {
        Self {
            primary,
            secondary: secondary.filter(|s| !s.is_empty()),
        }
    }

    /// Only the emulator's well-known key ([`EMULATOR_ACCESS_KEY`]).
    pub fn emulator() -> Self {
        Self::new(EMULATOR_ACCESS_KEY.to_owned(), None)
    }

    /// The primary key: the one used to sign tokens and signatures issued by us.
    pub fn primary(&self) -> &str {
        &self.primary
    }

    /// The secondary key, if any.
    pub fn secondary(&self) -> Option<&str> {
        self.secondary.as_deref()
    }

    /// Every usable (non-empty) key, primary first.
    pub fn all(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.primary.as_str())
            .chain(self.secondary.as_deref())
            .filter(|k| !k.is_empty())
    }
}

impl fmt::Debug for AccessKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessKeys")
            .field("primary", &"<redacted>")
            .field("secondary", &self.secondary.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Which of the [`AccessKeys`] a token's signature matched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum SigningKey {
    #[default]
    Primary,
    Secondary,
}

/// A fresh, unguessable connection token: 16 random bytes from a CSPRNG,
/// base64url without padding (22 characters).
pub fn generate_connection_token() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}
