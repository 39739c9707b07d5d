//! The cost of verifying one access token, as a node does for every client connect and every
//! REST call: a client token with a user id and a role claim, signed with the secondary key
//! (so both keys are tried), and one signed with the primary; then the same tokens through a
//! [`TokenVerifier`] that has seen them (a connect after its negotiate, a REST caller's
//! repeated token).
//!
//! `cargo bench -p switchyard-auth --bench verify [-- TOKENS]` verifies about TOKENS tokens
//! per case (default 300,000) and prints µs per token. Each case is its own
//! `#[inline(never)]` function, for `valgrind --tool=callgrind` instruction counts.

use std::hint::black_box;
use std::time::{Duration, Instant};

use switchyard_auth::{verify_token, AccessKeys, TokenBuilder, TokenVerifier};

const NOW: i64 = 1_700_000_000;
const PRIMARY: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGH";
const SECONDARY: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ012345";
const AUDIENCE: &str = "http://localhost/client/?hub=chat";

#[inline(never)]
fn case_verify(token: &str, keys: &AccessKeys, rounds: usize) {
    for _ in 0..rounds {
        let verified = verify_token(black_box(token), keys, NOW, |aud| aud == AUDIENCE);
        black_box(verified.expect("a valid token"));
    }
}

#[inline(never)]
fn case_remembered(token: &str, verifier: &TokenVerifier, rounds: usize) {
    for _ in 0..rounds {
        let verified = verifier.verify(black_box(token), NOW, |aud| aud == AUDIENCE);
        black_box(verified.expect("a valid token"));
    }
}

fn main() {
    let tokens: usize = std::env::args()
        .skip(1)
        .find_map(|arg| arg.replace('_', "").parse().ok())
        .unwrap_or(300_000);
    let keys = AccessKeys::new(PRIMARY.to_owned(), Some(SECONDARY.to_owned()));
    let builder = TokenBuilder::new(AUDIENCE)
        .claim("nameid", "alice")
        .claim("role", "admin")
        .lifetime(Duration::from_secs(3600));
    for (name, key) in [("primary key", PRIMARY), ("secondary key", SECONDARY)] {
        let token = builder.sign(key, NOW);
        let start = Instant::now();
        case_verify(&token, &keys, tokens);
        let per = start.elapsed().as_nanos() as f64 / tokens as f64 / 1000.0;
        println!("verify_token ({name:<13}) {per:>7.2} µs/token  ({tokens} tokens)");
    }
    let verifier = TokenVerifier::new(keys.clone());
    for (name, key) in [("primary key", PRIMARY), ("secondary key", SECONDARY)] {
        let token = builder.sign(key, NOW);
        let start = Instant::now();
        case_remembered(&token, &verifier, tokens);
        let per = start.elapsed().as_nanos() as f64 / tokens as f64 / 1000.0;
        println!("TokenVerifier, seen before ({name:<13}) {per:>7.2} µs/token  ({tokens} tokens)");
    }
}
