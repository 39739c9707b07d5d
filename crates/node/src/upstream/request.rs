//! One upstream POST: bounded concurrency per origin, one timeout over waiting and sending,
//! and a bounded response body.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH};
use tokio::sync::Semaphore;

/// Origins kept without a request in flight before the table is pruned.
const MAX_IDLE_ORIGINS: usize = 256;

/// What came back.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

/// Why nothing usable came back.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No answer within the timeout (a free slot included).
    Timeout,
    /// Connecting, sending or reading failed; the text is for the log (no URL in it).
    Unreachable(String),
    /// The body passed the configured maximum.
    TooLarge,
}

impl Failure {
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Unreachable(_) => "unreachable",
            Failure::TooLarge => "too_large",
        }
    }
}

/// The shared HTTP client and the per-origin slots.
///
/// reqwest rather than hyper-util's client: it is already in the build, and gives keep-alive
/// pooling, rustls for https upstreams (public CAs: the roots are built in), proxy settings
/// from the environment and a connect timeout without code of ours. Redirects are not followed (a webhook that moved is a
/// configuration error, and a redirect must not take a signed request elsewhere).
pub(crate) struct Sender {
    http: reqwest::Client,
    timeout: Duration,
    max_concurrency: usize,
    max_response_size: usize,
    origins: Mutex<HashMap<Box<str>, Arc<Semaphore>>>,
}

impl Sender {
    /// `extra_roots` (`upstream.ca_file`) are trusted alongside the public roots.
    pub(crate) fn new(
        timeout: Duration,
        max_concurrency: usize,
        max_response_size: usize,
        extra_roots: &[rustls_pki_types::CertificateDer<'static>],
    ) -> Self {
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(timeout)
            .pool_idle_timeout(Duration::from_secs(90));
        for root in extra_roots {
            // Parsed at validation already; reqwest takes DER as it is.
            if let Ok(certificate) = reqwest::Certificate::from_der(root) {
                builder = builder.add_root_certificate(certificate);
            }
        }
        let http = builder
            .build()
            .expect("the upstream HTTP client builds (rustls with built-in roots)");
        Sender {
            http,
            timeout,
            max_concurrency,
            max_response_size,
            origins: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn max_response_size(&self) -> usize {
        self.max_response_size
    }

    /// The slots of `url`'s origin (scheme, host, port).
    fn slots(&self, url: &reqwest::Url) -> Arc<Semaphore> {
        let origin = url.origin().ascii_serialization();
        let mut origins = self.origins.lock();
        if let Some(slots) = origins.get(origin.as_str()) {
            return slots.clone();
        }
        // A `{hub}` in the host makes origins open-ended: forget those with nothing in flight.
        if origins.len() >= MAX_IDLE_ORIGINS {
            origins.retain(|_, slots| Arc::strong_count(slots) > 1);
        }
        let slots = Arc::new(Semaphore::new(self.max_concurrency));
        origins.insert(origin.into_boxed_str(), slots.clone());
        slots
    }

    /// POSTs `body` to `url` and reads the answer, all within the timeout.
    pub(crate) async fn post(
        &self,
        url: &str,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<Answer, Failure> {
        let url = reqwest::Url::parse(url)
            .map_err(|e| Failure::Unreachable(format!("bad upstream URL: {e}")))?;
        let slots = self.slots(&url);
        let exchange = async {
            let _slot = slots
                .acquire_owned()
                .await
                .map_err(|_| Failure::Unreachable("closed".into()))?;
            let response = self
                .http
                .post(url)
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(unreachable)?;
            let status = response.status().as_u16();
            let declared = response
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok());
            if declared.is_some_and(|len| len > self.max_response_size) {
                return Err(Failure::TooLarge);
            }
            let body = read_bounded(response, self.max_response_size).await?;
            Ok(Answer { status, body })
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .unwrap_or(Err(Failure::Timeout))
    }
}

async fn read_bounded(mut response: reqwest::Response, max: usize) -> Result<Bytes, Failure> {
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(unreachable)? {
        if body.len() + chunk.len() > max {
            return Err(Failure::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// reqwest's error without the URL: Functions URLs carry their key in the query.
fn unreachable(error: reqwest::Error) -> Failure {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    Failure::Unreachable(text)
}

/// A header value from text that may hold anything a token or query can: control
/// characters become spaces, other bytes pass as they are.
pub(crate) fn header_value(text: &str) -> HeaderValue {
    let cleaned: Vec<u8> = text
        .bytes()
        .map(|b| if b < 0x20 || b == 0x7f { b' ' } else { b })
        .collect();
    HeaderValue::from_bytes(&cleaned).unwrap_or_else(|_| HeaderValue::from_static(""))
}

pub(crate) fn header(headers: &mut HeaderMap, name: &'static str, value: &str) {
    headers.insert(HeaderName::from_static(name), header_value(value));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_cleaned() {
        assert_eq!(header_value("a: b, c: d").as_bytes(), b"a: b, c: d");
        assert_eq!(header_value("x\r\ny\tz").as_bytes(), b"x  y z");
        assert_eq!(header_value("ü").as_bytes(), "ü".as_bytes());
    }
}
