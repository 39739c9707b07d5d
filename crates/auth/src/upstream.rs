//! `X-ASRS-Signature` for serverless upstream requests (spec §5).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::keys::AccessKeys;

/// Header carrying the signature.
pub const SIGNATURE_HEADER: &str = "X-ASRS-Signature";

/// HMAC-SHA256 keyed with the UTF-8 access key that has absorbed the
/// connection id.
fn signature_mac(key: &str, connection_id: &str) -> Hmac<Sha256> {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes())
        .expect("HMAC accepts keys of any length");
    mac.update(connection_id.as_bytes());
    mac
}

/// The `X-ASRS-Signature` value for `connection_id`: for each key (primary
/// first) `sha256=` + uppercase hex of HMAC-SHA256(key = UTF-8 access key,
/// data = UTF-8 connection id), joined with `,`.
pub fn upstream_signature(keys: &AccessKeys, connection_id: &str) -> String {
    keys.all()
        .map(|key| {
            let digest = signature_mac(key, connection_id).finalize().into_bytes();
            format!("sha256={}", hex::encode_upper(digest))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Does any entry of an `X-ASRS-Signature` header value match any key, the
/// way Azure Functions checks it (hex case-insensitive, `sha256=` prefix
/// case-insensitive, entries separated by `,` and optional spaces)?
pub fn verify_upstream_signature(header: &str, keys: &AccessKeys, connection_id: &str) -> bool {
    header.split(',').any(|entry| {
        let entry = entry.trim();
        let Some(hex_part) = entry
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case("sha256="))
            .map(|_| &entry[7..])
        else {
            return false;
        };
        let Ok(digest) = hex::decode(hex_part) else {
            return false;
        };
        keys.all().any(|key| {
            signature_mac(key, connection_id)
                .verify_slice(&digest)
                .is_ok()
        })
    })
}
