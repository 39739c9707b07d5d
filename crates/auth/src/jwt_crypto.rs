//! The HMAC-only cryptography behind `jsonwebtoken` (HS256, HS384, HS512).
//!
//! `jsonwebtoken`'s own back ends come as a bundle: its `rust_crypto`
//! feature also builds RSA, ECDSA and EdDSA (the `rsa` crate among them,
//! with an open advisory), and `aws_lc_rs` a C library. Tokens here are only
//! ever HMAC-signed, so the crate is built with no back end and this
//! provider, on the `hmac` and `sha2` crates, is installed as the process
//! default before the first token is signed or verified.

use hmac::{Hmac, Mac};
use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{ErrorKind, Result};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, EncodingKey};
use sha2::{Sha256, Sha384, Sha512};

/// Signs and verifies HMAC algorithms only; asked for any other algorithm
/// it fails with `InvalidAlgorithm`. JWK key utilities are left
/// unimplemented: no JWK is ever read.
static HMAC_ONLY: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    key_utils: KeyUtils::new_unimplemented(),
};

/// Makes [`HMAC_ONLY`] the process-wide provider; called before every
/// `jsonwebtoken::encode`/`decode`. Only the first call installs it, the
/// later ones find it in place (the error they get is ignored for that).
/// Every use of `jsonwebtoken` in the workspace goes through this crate, so
/// no other code can have fixed a different provider first.
pub(crate) fn install() {
    let _ = HMAC_ONLY.install_default();
}

/// An HMAC keyed with the token key, of the hash the algorithm names.
enum KeyedHmac {
    Sha256(Hmac<Sha256>),
    Sha384(Hmac<Sha384>),
    Sha512(Hmac<Sha512>),
}

impl KeyedHmac {
    fn new(algorithm: Algorithm, key: &[u8]) -> Result<Self> {
        // HMAC takes a key of any length, so `new_from_slice` cannot fail.
        let invalid_key = |_| ErrorKind::InvalidKeyFormat;
        Ok(match algorithm {
            Algorithm::HS256 => Self::Sha256(Hmac::new_from_slice(key).map_err(invalid_key)?),
            Algorithm::HS384 => Self::Sha384(Hmac::new_from_slice(key).map_err(invalid_key)?),
            Algorithm::HS512 => Self::Sha512(Hmac::new_from_slice(key).map_err(invalid_key)?),
            _ => return Err(ErrorKind::InvalidAlgorithm.into()),
        })
    }

    fn tag(&self, message: &[u8]) -> Vec<u8> {
        fn tag_of<M: Mac + Clone>(mac: &M, message: &[u8]) -> Vec<u8> {
            let mut mac = mac.clone();
            mac.update(message);
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Self::Sha256(mac) => tag_of(mac, message),
            Self::Sha384(mac) => tag_of(mac, message),
            Self::Sha512(mac) => tag_of(mac, message),
        }
    }

    /// Compares in constant time (`Mac::verify_slice`).
    fn matches(&self, message: &[u8], tag: &[u8]) -> bool {
        fn matches_of<M: Mac + Clone>(mac: &M, message: &[u8], tag: &[u8]) -> bool {
            let mut mac = mac.clone();
            mac.update(message);
            mac.verify_slice(tag).is_ok()
        }
        match self {
            Self::Sha256(mac) => matches_of(mac, message, tag),
            Self::Sha384(mac) => matches_of(mac, message, tag),
            Self::Sha512(mac) => matches_of(mac, message, tag),
        }
    }
}

/// One algorithm and key, for signing or verifying.
struct HmacJwt {
    algorithm: Algorithm,
    mac: KeyedHmac,
}

impl HmacJwt {
    fn new(algorithm: Algorithm, family: AlgorithmFamily, key: &[u8]) -> Result<Self> {
        if family != AlgorithmFamily::Hmac {
            return Err(ErrorKind::InvalidKeyFormat.into());
        }
        Ok(Self {
            algorithm,
            mac: KeyedHmac::new(algorithm, key)?,
        })
    }
}

impl Signer<Vec<u8>> for HmacJwt {
    fn try_sign(&self, message: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
        Ok(self.mac.tag(message))
    }
}

impl Verifier<Vec<u8>> for HmacJwt {
    fn verify(&self, message: &[u8], tag: &Vec<u8>) -> std::result::Result<(), signature::Error> {
        if self.mac.matches(message, tag) {
            Ok(())
        } else {
            Err(signature::Error::new())
        }
    }
}

impl JwtSigner for HmacJwt {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

impl JwtVerifier for HmacJwt {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

fn new_signer(algorithm: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    Ok(Box::new(HmacJwt::new(
        *algorithm,
        key.family(),
        key.as_bytes(),
    )?))
}

fn new_verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    Ok(Box::new(HmacJwt::new(
        *algorithm,
        key.family(),
        key.try_get_as_bytes()?,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231 test case 2 (key "Jefe"), the HMAC-SHA-256/384/512 tags.
    #[test]
    fn tags_match_rfc_4231() {
        let message = b"what do ya want for nothing?";
        let cases = [
            (
                Algorithm::HS256,
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                Algorithm::HS384,
                "af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b47e42ec3736322445e\
                 8e2240ca5e69e2c78b3239ecfab21649",
            ),
            (
                Algorithm::HS512,
                "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7ea250554\
                 9758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737",
            ),
        ];
        for (algorithm, expected) in cases {
            let signer = new_signer(&algorithm, &EncodingKey::from_secret(b"Jefe")).unwrap();
            let tag = signer.try_sign(message).unwrap();
            assert_eq!(hex::encode(&tag), expected, "{algorithm:?}");
            let verifier = new_verifier(&algorithm, &DecodingKey::from_secret(b"Jefe")).unwrap();
            assert!(verifier.verify(message, &tag).is_ok());
            let mut wrong = tag.clone();
            wrong[0] ^= 1;
            assert!(verifier.verify(message, &wrong).is_err());
            assert!(verifier
                .verify(message, &tag[..tag.len() - 1].to_vec())
                .is_err());
        }
    }

    #[test]
    fn other_algorithms_are_refused() {
        let key = EncodingKey::from_secret(b"key");
        for algorithm in [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA] {
            let Err(error) = new_signer(&algorithm, &key) else {
                panic!("{algorithm:?} was accepted");
            };
            assert!(
                matches!(error.kind(), ErrorKind::InvalidAlgorithm),
                "{error}"
            );
        }
        let key = DecodingKey::from_rsa_raw_components(b"n", b"e");
        let Err(error) = new_verifier(&Algorithm::HS256, &key) else {
            panic!("an RSA key was accepted for HS256");
        };
        assert!(
            matches!(error.kind(), ErrorKind::InvalidKeyFormat),
            "{error}"
        );
    }
}
