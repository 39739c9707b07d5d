//! Links fred and nothing else: only for `cargo tree` and build time.
use fred::prelude::*;

fn main() {
    let config = Config::from_url("redis://127.0.0.1:6379").expect("url");
    std::hint::black_box(Builder::from_config(config));
}
