//! Links redis-rs and nothing else: only for `cargo tree` and build time.
fn main() {
    let client = redis::Client::open("redis://127.0.0.1:6379/?protocol=resp3").expect("url");
    let config = redis::aio::ConnectionManagerConfig::new().set_number_of_retries(0);
    std::hint::black_box((client, config));
}
