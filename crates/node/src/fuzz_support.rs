//! Helpers the fuzz entry points share: a runtime context for futures polled once, request
//! bodies in pieces, and headers from raw pairs.

use std::convert::Infallible;
use std::future::Future;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use futures_util::FutureExt;

thread_local! {
    /// Gives timers a runtime to register with; nothing is ever spawned on it.
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
}

/// Polls `future` once inside a runtime context; `None` if it is not ready then.
pub(crate) fn poll_once<F: Future>(future: F) -> Option<F::Output> {
    RUNTIME.with(|runtime| {
        let _entered = runtime.enter();
        future.now_or_never()
    })
}

/// A body that arrives in the given pieces, as a request body read from the network does.
pub(crate) fn body_of(chunks: &[&[u8]]) -> Body {
    let chunks: Vec<Result<Bytes, Infallible>> = chunks
        .iter()
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    Body::from_stream(futures_util::stream::iter(chunks))
}

/// Headers from raw name/value pairs; a pair that is not a valid header is left out, as an
/// HTTP server would have refused it before any handler ran.
pub(crate) fn header_map(headers: &[(&str, &[u8])]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_bytes(value),
        ) {
            map.append(name, value);
        }
    }
    map
}
