//! Sealing: an HMAC-SHA256 tag under the cluster's secret, appended to an encoded envelope,
//! so that only nodes holding the secret can speak on the backplane. A receiver checks the
//! tag before it decodes anything. No I/O.
//!
//! Keys are prepared once (a keyed HMAC state); each seal or check clones it, so a message
//! costs one HMAC over bytes already in memory and no copy of the payload.

use bytes::{BufMut, Bytes, BytesMut};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Bytes the tag adds to an envelope.
pub const TAG_LEN: usize = 32;

/// What a node's key is turned into before it keys anything: the raw access key never keys a
/// tag that travels, and a future scheme gets a new label.
const LABEL: &[u8] = b"switchyard cluster v1";

type Key = Hmac<Sha256>;

/// The keys a node seals with (the first) and accepts (all of them: during a rotation the
/// next key is accepted before any node seals with it).
#[derive(Clone)]
pub struct Seal {
    keys: Vec<Key>,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Seal({} keys)", self.keys.len())
    }
}

/// The cluster secret derived from a node's key or configured secret.
pub fn derive(secret: &[u8]) -> [u8; 32] {
    let mut mac = Key::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(LABEL);
    mac.finalize().into_bytes().into()
}

impl Seal {
    /// Seals with the secret derived from `primary`, accepts that and the ones from `also`.
    pub fn from_secrets(primary: &[u8], also: &[&[u8]]) -> Seal {
        let keys = std::iter::once(primary)
            .chain(also.iter().copied())
            .map(|secret| Key::new_from_slice(&derive(secret)).expect("any length"))
            .collect();
        Seal { keys }
    }

    /// The seal of development mode and of backplanes nobody gave keys: derived from the
    /// publicly known Emulator key, so it keeps out only mistakes, not attackers.
    pub fn development() -> Seal {
        Seal::from_secrets(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH", &[])
    }

    /// The tag of `parts` (concatenated) under the sealing key.
    pub fn tag(&self, parts: &[&[u8]]) -> [u8; TAG_LEN] {
        let mut mac = self.keys[0].clone();
        for part in parts {
            mac.update(part);
        }
        mac.finalize().into_bytes().into()
    }

    /// Whether `tag` is the tag of `parts` under any accepted key (compared in constant time).
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.keys.iter().any(|key| {
            let mut mac = key.clone();
            for part in parts {
                mac.update(part);
            }
            mac.verify_slice(tag).is_ok()
        })
    }

    /// Appends the tag of what `buffer` holds.
    pub(super) fn append_tag(&self, buffer: &mut BytesMut) {
        let tag = self.tag(&[buffer]);
        buffer.put_slice(&tag);
    }

    /// The envelope inside a sealed message (sharing its buffer), or `None` when the tag is
    /// missing or made with no key this node accepts.
    pub fn open(&self, sealed: &Bytes) -> Option<Bytes> {
        let body_len = sealed.len().checked_sub(TAG_LEN)?;
        let (body, tag) = sealed.split_at(body_len);
        self.verify(&[body], tag).then(|| sealed.slice(..body_len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_opens_under_an_accepted_key_only() {
        let old = Seal::from_secrets(b"old", &[]);
        let rotating = Seal::from_secrets(b"old", &[b"new"]);
        let new = Seal::from_secrets(b"new", &[b"old"]);
        let mut buffer = BytesMut::from(&b"envelope"[..]);
        old.append_tag(&mut buffer);
        let sealed = buffer.freeze();
        assert_eq!(sealed.len(), 8 + TAG_LEN);
        for seal in [&old, &rotating, &new] {
            assert_eq!(seal.open(&sealed).as_deref(), Some(&b"envelope"[..]));
        }
        assert_eq!(Seal::from_secrets(b"other", &[]).open(&sealed), None);
        assert_eq!(Seal::development().open(&sealed), None);
        // Every cut and every flipped byte fails.
        for cut in 0..sealed.len() {
            assert_eq!(old.open(&sealed.slice(..cut)), None, "cut at {cut}");
        }
        for at in 0..sealed.len() {
            let mut bad = sealed.to_vec();
            bad[at] ^= 1;
            assert_eq!(old.open(&Bytes::from(bad)), None, "flipped byte {at}");
        }
    }

    #[test]
    fn the_raw_secret_is_not_the_key() {
        assert_ne!(&derive(b"k")[..], b"k");
        assert_ne!(derive(b"k"), derive(b"l"));
        assert!(!format!("{:?}", Seal::from_secrets(b"secret", &[])).contains("secret"));
    }
}
