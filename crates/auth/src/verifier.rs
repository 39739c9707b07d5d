//! [`TokenVerifier`]: [`verify_token`] for a fixed set of keys, remembering the tokens that
//! passed. A client's negotiate and its connect carry the same token, and a REST caller sends
//! one token per URL for its lifetime; checking a signature again (≈ 4 µs: base64, HMAC, JSON)
//! buys nothing, so a token seen valid is looked up instead and only its expiry and audience
//! are checked again.
//!
//! Safe because a token's signature, payload and `nbf` cannot change: the same string with the
//! same keys always verifies the same way, and time only moves it toward `exp` (checked on
//! every hit). Only tokens that passed are kept, so filling the memory needs the keys; it is
//! bounded in bytes all the same. Lookups hash the whole token with a random key before any
//! comparison, so the time a lookup takes says nothing useful about a stored token.

use std::collections::HashMap;

use parking_lot::{Mutex, MutexGuard};

use crate::jwt::{verify_token_ignoring_audience, AuthError, VerifiedToken, EXPIRY_LEEWAY_SECS};
use crate::keys::AccessKeys;

/// Bytes of tokens and claims kept by default: ≈ 4,600 tokens of ≈ 900 B (a REST URL's
/// token with its claims), more than a node's REST callers and negotiating clients at once.
pub const DEFAULT_CACHE_BYTES: usize = 4 * 1024 * 1024;

/// Rough cost of an entry beyond its strings (the map slot, the vectors, allocator headers).
const ENTRY_OVERHEAD: usize = 160;

/// Verifies tokens against `keys`, remembering the ones that passed (see the module docs).
pub struct TokenVerifier {
    keys: AccessKeys,
    budget: usize,
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    tokens: HashMap<Box<str>, VerifiedToken>,
    bytes: usize,
}

impl TokenVerifier {
    pub fn new(keys: AccessKeys) -> TokenVerifier {
        TokenVerifier::with_budget(keys, DEFAULT_CACHE_BYTES)
    }

    /// `budget` bytes of remembered tokens at most; 0 remembers none.
    pub fn with_budget(keys: AccessKeys, budget: usize) -> TokenVerifier {
        TokenVerifier {
            keys,
            budget,
            cache: Mutex::new(Cache::default()),
        }
    }

    pub fn keys(&self) -> &AccessKeys {
        &self.keys
    }

    /// What [`crate::verify_token`] answers for `token` at `now_unix`, the same errors in the
    /// same order, without checking the signature again for a token that passed before.
    pub fn verify(
        &self,
        token: &str,
        now_unix: i64,
        audience_ok: impl Fn(&str) -> bool,
    ) -> Result<VerifiedToken, AuthError> {
        let verified = match self.remembered(token, now_unix)? {
            Some(verified) => verified,
            None => {
                let verified = verify_token_ignoring_audience(token, &self.keys, now_unix)?;
                self.remember(token, &verified, now_unix);
                verified
            }
        };
        if verified.audiences.iter().any(|aud| audience_ok(aud)) {
            Ok(verified)
        } else {
            Err(AuthError::WrongAudience {
                found: verified.audiences,
            })
        }
    }

    /// [`crate::verify_token`] with these keys, neither looked up nor remembered: for tokens
    /// used once or twice (a client's negotiate and connect), which would only take room.
    pub fn verify_once(
        &self,
        token: &str,
        now_unix: i64,
        audience_ok: impl Fn(&str) -> bool,
    ) -> Result<VerifiedToken, AuthError> {
        crate::jwt::verify_token(token, &self.keys, now_unix, audience_ok)
    }

    /// Tokens remembered now (for tests and metrics).
    pub fn remembered_count(&self) -> usize {
        self.lock().tokens.len()
    }

    fn lock(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock()
    }

    /// A remembered token, still unexpired; an expired one is forgotten and refused.
    fn remembered(&self, token: &str, now_unix: i64) -> Result<Option<VerifiedToken>, AuthError> {
        if self.budget == 0 {
            return Ok(None);
        }
        let mut cache = self.lock();
        let Some(verified) = cache.tokens.get(token) else {
            return Ok(None);
        };
        if expired(verified, now_unix) {
            if let Some((key, verified)) = cache.tokens.remove_entry(token) {
                cache.bytes -= cost(&key, &verified);
            }
            return Err(AuthError::Expired);
        }
        Ok(Some(verified.clone()))
    }

    fn remember(&self, token: &str, verified: &VerifiedToken, now_unix: i64) {
        let size = cost(token, verified);
        if size > self.budget {
            return;
        }
        let mut cache = self.lock();
        if cache.bytes + size > self.budget {
            // Rare (the budget holds thousands): drop what expired, else every other entry
            // (the map's order is random per process), which keeps every insert O(1) on
            // average. Half, not all: callers that cycle through more tokens than fit
            // (3,000 REST callers each with its own URL) still find half of them.
            cache.tokens.retain(|_, v| !expired(v, now_unix));
            if cache.tokens.iter().map(|(k, v)| cost(k, v)).sum::<usize>() + size > self.budget {
                let mut keep = false;
                cache.tokens.retain(|_, _| {
                    keep = !keep;
                    keep
                });
            }
            cache.bytes = cache.tokens.iter().map(|(k, v)| cost(k, v)).sum();
            if cache.bytes + size > self.budget {
                cache.tokens.clear();
                cache.bytes = 0;
            }
        }
        if cache
            .tokens
            .insert(token.into(), verified.clone())
            .is_none()
        {
            cache.bytes += size;
        }
    }
}

fn expired(verified: &VerifiedToken, now_unix: i64) -> bool {
    now_unix >= verified.expires_at.saturating_add(EXPIRY_LEEWAY_SECS)
}

fn cost(token: &str, verified: &VerifiedToken) -> usize {
    let claims: usize = verified
        .claims
        .iter()
        .map(|(k, v)| k.len() + v.len() + 48)
        .sum();
    let audiences: usize = verified.audiences.iter().map(|a| a.len() + 24).sum();
    token.len() + claims + audiences + ENTRY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::jwt::{verify_token, TokenBuilder};

    const KEY: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH";
    const AUD: &str = "http://localhost/client/?hub=chat";
    const NOW: i64 = 1_700_000_000;

    fn token(user: &str, lifetime: u64) -> String {
        TokenBuilder::new(AUD)
            .claim("nameid", user)
            .lifetime(Duration::from_secs(lifetime))
            .sign(KEY, NOW)
    }

    fn keys() -> AccessKeys {
        AccessKeys::new(KEY.to_owned(), None)
    }

    #[test]
    fn a_remembered_token_answers_as_a_fresh_verify_would() {
        let verifier = TokenVerifier::new(keys());
        let t = token("alice", 60);
        let first = verifier.verify(&t, NOW, |a| a == AUD).unwrap();
        assert_eq!(verifier.remembered_count(), 1);
        let again = verifier.verify(&t, NOW + 1, |a| a == AUD).unwrap();
        assert_eq!(first, again);
        assert_eq!(
            again,
            verify_token(&t, &keys(), NOW + 1, |a| a == AUD).unwrap()
        );
        // The audience is checked on every use, not remembered.
        let wrong = verifier
            .verify(&t, NOW + 1, |a| a == "http://other/")
            .unwrap_err();
        assert!(matches!(wrong, AuthError::WrongAudience { found } if found == [AUD]));
    }

    #[test]
    fn a_remembered_token_expires_on_time_and_is_forgotten() {
        let verifier = TokenVerifier::new(keys());
        let t = token("alice", 60);
        verifier.verify(&t, NOW, |_| true).unwrap();
        let exp = NOW + 60;
        assert!(verifier
            .verify(&t, exp + EXPIRY_LEEWAY_SECS - 1, |_| true)
            .is_ok());
        let late = exp + EXPIRY_LEEWAY_SECS;
        assert!(matches!(
            verifier.verify(&t, late, |_| true),
            Err(AuthError::Expired)
        ));
        assert!(matches!(
            verify_token(&t, &keys(), late, |_| true),
            Err(AuthError::Expired)
        ));
        assert_eq!(verifier.remembered_count(), 0);
    }

    #[test]
    fn only_tokens_that_pass_are_remembered() {
        let verifier = TokenVerifier::new(keys());
        let forged = token("alice", 60).replace("eyJ", "eyK");
        assert!(verifier.verify(&forged, NOW, |_| true).is_err());
        let other_key = TokenBuilder::new(AUD)
            .lifetime(Duration::from_secs(60))
            .sign("another key entirely, not this service's", NOW);
        assert!(matches!(
            verifier.verify(&other_key, NOW, |_| true),
            Err(AuthError::BadSignature)
        ));
        // A token refused for its audience passed the signature: it is remembered, and refused
        // again for the audience only.
        let t = token("bob", 60);
        assert!(verifier.verify(&t, NOW, |_| false).is_err());
        assert_eq!(verifier.remembered_count(), 1);
        assert!(verifier.verify(&t, NOW, |a| a == AUD).is_ok());
    }

    #[test]
    fn the_budget_bounds_what_is_remembered() {
        let one = cost(
            &token("user-0000", 3600),
            &verify_token(&token("user-0000", 3600), &keys(), NOW, |_| true).unwrap(),
        );
        let verifier = TokenVerifier::with_budget(keys(), one * 10);
        for i in 0..25 {
            let t = token(&format!("user-{i:04}"), 3600);
            verifier.verify(&t, NOW, |_| true).unwrap();
            assert!(verifier.remembered_count() <= 10);
            assert!(verifier.lock().bytes <= one * 10);
        }
        // Past the budget it dropped half, and goes on remembering.
        assert!(verifier.remembered_count() >= 5);
        let none = TokenVerifier::with_budget(keys(), 0);
        none.verify(&token("a", 60), NOW, |_| true).unwrap();
        assert_eq!(none.remembered_count(), 0);
    }

    #[test]
    fn expired_tokens_make_room_first() {
        let short = token("short", 10);
        let one = cost(
            &short,
            &verify_token(&short, &keys(), NOW, |_| true).unwrap(),
        );
        let verifier = TokenVerifier::with_budget(keys(), one * 2 + one / 2);
        verifier.verify(&short, NOW, |_| true).unwrap();
        let long = token("longer", 3600);
        verifier.verify(&long, NOW, |_| true).unwrap();
        // The third does not fit; the expired one leaves, the live one stays.
        let later = NOW + 10 + EXPIRY_LEEWAY_SECS;
        verifier
            .verify(&token("third", 3600), later, |_| true)
            .unwrap();
        assert_eq!(verifier.remembered_count(), 2);
        assert!(verifier.lock().tokens.contains_key(long.as_str()));
    }
}
