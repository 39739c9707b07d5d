//! The HTTP server under the routes: accepting sockets within bounds, and timeouts on what
//! a peer must send.
//!
//! - Sockets: at most `limits.max_http_connections` (by default the open-files limit, raised
//!   to its hard limit at start, minus a margin, so the process never runs out of
//!   descriptors); the last `limits.reserved_http_connections` of them serve only health,
//!   metrics and app servers, so a flood of clients cannot lock operators and app servers out;
//!   at most `limits.max_connections_per_address` from one address (trusted proxies and
//!   `limits.exempt_addresses` exempt). In the reserve a socket is answered 503.
//! - At the cap a new socket takes the place of the oldest one that is doing nothing: it has
//!   been read and has no request in progress (sent nothing yet, part of a request's headers,
//!   or idle between keep-alive requests). Silent sockets would otherwise hold every place,
//!   the reserve too, until their header timeout, and a peer that re-opens them at once
//!   keeps health probes out for good. Only with nothing to give way is a socket closed at
//!   once; the cap may be passed by [`EVICTION_SLACK`] for the moment an evicted socket
//!   takes to close.
//! - A request's headers must arrive within `timeouts.request_header_timeout`, and a socket
//!   with no request in progress (none yet, or idle between keep-alive requests) is closed
//!   after as long; bodies have their own timeout where they are read. Upgraded WebSockets
//!   leave these rules (their own keep-alive and timeouts apply) but stay counted: the count
//!   lives in the stream, which the upgrade hands over.
//! - With TLS, the handshake runs in the socket's own task and must end within
//!   `timeouts.request_header_timeout`; the TLS stream wraps the counted socket, so an
//!   upgraded WebSocket still holds its place.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router as HttpRouter;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use crate::config::{canonical_ip, ValidConfig};
use crate::metrics::{Metrics, ReasonLabel};

/// Descriptors kept free of sockets when the cap is automatic: files, the log, the runtime.
const AUTOMATIC_MARGIN: usize = 64;
/// How long accepting pauses after the process ran out of descriptors anyway.
const OUT_OF_FILES_PAUSE: Duration = Duration::from_millis(50);
/// Sockets over the cap while the ones that gave way close.
const EVICTION_SLACK: usize = 16;
/// Sockets looked at for one that can give way, at most, per socket over the cap.
const EVICTION_SCAN: usize = 256;
/// Paths a socket in the reserve may still use.
const RESERVED_PATHS: &[&str] = &["/api/health", "/api/v1/health", "/metrics", "/server"];

/// The socket bounds, from the settings.
#[derive(Debug, Clone, Copy)]
struct Caps {
    max: usize,
    reserved: usize,
    per_address: usize,
}

impl Caps {
    fn new(config: &ValidConfig) -> Caps {
        raise_open_files_limit();
        let limits = &config.limits;
        let max = match limits.max_http_connections {
            0 => open_files_limit().saturating_sub(AUTOMATIC_MARGIN).max(1),
            n => n,
        };
        Caps {
            max,
            reserved: limits.reserved_http_connections.min(max.saturating_sub(1)),
            per_address: limits.max_connections_per_address,
        }
    }
}

/// Raises the soft open-files limit to the hard one: the automatic socket cap follows it, and
/// a distribution's soft default (often 1,024) would cap a node far below what it can hold.
fn raise_open_files_limit() {
    let before = open_files_limit();
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(now) if now as usize > before => {
            tracing::info!(from = before, to = now, "raised the open-files limit");
        }
        Ok(now) => tracing::debug!(limit = now, "open-files limit"),
        Err(error) => {
            tracing::warn!(%error, limit = before, "could not raise the open-files limit");
        }
    }
}

/// The process's soft limit on open files (generous when it cannot be read).
fn open_files_limit() -> usize {
    rlimit::getrlimit(rlimit::Resource::NOFILE)
        .map(|(soft, _)| usize::try_from(soft).unwrap_or(usize::MAX))
        .unwrap_or(1 << 20)
}

/// Open sockets, in all and per address, and those still serving HTTP, oldest first.
struct Gate {
    caps: Caps,
    open: AtomicUsize,
    by_address: Mutex<HashMap<IpAddr, usize>>,
    /// Entries of sockets that closed or became WebSockets are dropped as they are met
    /// (an upgraded socket's [`Activity`] is gone), and all at once when they pile up.
    serving: Mutex<VecDeque<Weak<Activity>>>,
}

/// Why a socket was not served, or another closed for it.
#[derive(Clone, Copy)]
enum Refused {
    Full,
    Address,
    Evicted,
}

impl Refused {
    fn code(self) -> &'static str {
        match self {
            Refused::Full => "full",
            Refused::Address => "per_address",
            Refused::Evicted => "evicted",
        }
    }
}

/// A socket counted by the gate until it closes.
struct Ticket {
    gate: Arc<Gate>,
    address: Option<IpAddr>,
    metrics: Arc<Metrics>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.metrics.http_connections.dec();
        self.gate.open.fetch_sub(1, Ordering::AcqRel);
        self.gate.release_address(self.address);
    }
}

impl Gate {
    fn new(caps: Caps) -> Gate {
        Gate {
            caps,
            open: AtomicUsize::new(0),
            by_address: Mutex::new(HashMap::new()),
            serving: Mutex::new(VecDeque::new()),
        }
    }

    /// Counts a new socket, or says why it cannot be served. The bool: it is in the reserve.
    /// `exempt`: no per-address cap.
    fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        exempt: bool,
        metrics: &Arc<Metrics>,
    ) -> Result<(Ticket, bool), Refused> {
        // The address first: a socket it refuses must not make another give way.
        let address = (self.caps.per_address != 0 && !exempt).then_some(peer);
        if let Some(address) = address {
            let mut by_address = self.by_address.lock();
            let count = by_address.entry(address).or_insert(0);
            if *count >= self.caps.per_address {
                return Err(Refused::Address);
            }
            *count += 1;
        }
        let take = |limit: usize| {
            self.open
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < limit).then_some(n + 1)
                })
        };
        let taken = take(self.caps.max).or_else(|_| {
            if !self.evict_one() {
                return Err(Refused::Full);
            }
            refused(metrics, Refused::Evicted);
            take(self.caps.max + EVICTION_SLACK).map_err(|_| Refused::Full)
        });
        let open = match taken {
            Ok(open) => open,
            Err(why) => {
                self.release_address(address);
                return Err(why);
            }
        };
        metrics.http_connections.inc();
        let ticket = Ticket {
            gate: self.clone(),
            address,
            metrics: metrics.clone(),
        };
        Ok((ticket, open >= self.caps.max - self.caps.reserved))
    }

    /// Gives back a place of `address` under `max_connections_per_address`.
    fn release_address(&self, address: Option<IpAddr>) {
        let Some(address) = address else {
            return;
        };
        let mut by_address = self.by_address.lock();
        if let Some(count) = by_address.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                by_address.remove(&address);
            }
        }
    }

    /// Keeps a new socket's activity, for [`Gate::evict_one`].
    fn serving(&self, activity: &Arc<Activity>) {
        let mut serving = self.serving.lock();
        if serving.len() > 2 * self.open.load(Ordering::Acquire) + 64 {
            serving.retain(|entry| entry.strong_count() > 0);
        }
        serving.push_back(Arc::downgrade(activity));
    }

    /// Tells the oldest socket that is doing nothing to close; false when none is found.
    /// Busy sockets go to the back, so the next look starts elsewhere.
    fn evict_one(&self) -> bool {
        let mut serving = self.serving.lock();
        for _ in 0..EVICTION_SCAN.min(serving.len()) {
            let Some(entry) = serving.pop_front() else {
                break;
            };
            let Some(activity) = entry.upgrade() else {
                continue;
            };
            if activity.evict() {
                return true;
            }
            serving.push_back(entry);
        }
        false
    }
}

fn refused(metrics: &Metrics, why: Refused) {
    metrics
        .http_connections_refused
        .get_or_create(&ReasonLabel { reason: why.code() })
        .inc();
}

/// Serves `router` on `listener` (over TLS with `tls`) until `shutdown` completes; then
/// stops accepting, runs `closing` (which closes the clients), and gives requests still in
/// flight `grace` to end.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run<C: Future<Output = ()>>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    router: HttpRouter,
    config: &ValidConfig,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
    closing: impl FnOnce() -> C,
    grace: Duration,
) -> std::io::Result<()> {
    let gate = Arc::new(Gate::new(Caps::new(config)));
    let builder = http_builder(config);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    let mut out_of_files_logged = false;
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    pause_after_failed_accept(&error, &mut out_of_files_logged).await;
                    continue;
                }
            },
        };
        let peer_ip = canonical_ip(peer.ip());
        let (ticket, reserved) =
            match gate.admit(peer_ip, config.is_exempt_address(peer_ip), &metrics) {
                Ok(admitted) => admitted,
                Err(why) => {
                    refused(&metrics, why);
                    drop(stream);
                    continue;
                }
            };
        // Small frames go out at once: Nagle's algorithm would hold a frame written while an
        // earlier one is unacknowledged (up to the peer's delayed-ACK time).
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::new());
        gate.serving(&activity);
        let service = service(
            peer,
            router.clone(),
            reserved,
            metrics.clone(),
            activity.clone(),
        );
        let accepted = Accepted {
            builder: builder.clone(),
            stream: Counted {
                stream,
                _ticket: ticket,
            },
            service,
            watcher: graceful.watcher(),
            activity,
            idle_limit: config.timeouts.request_header_timeout,
        };
        tokio::spawn(accepted.serve(peer, tls.clone(), metrics.clone()));
    }
    drop(listener);
    closing().await;
    let _ = tokio::time::timeout(grace, graceful.shutdown()).await;
    Ok(())
}

/// HTTP/1.1 and HTTP/2 (chosen per socket), with the header and keep-alive timeouts.
fn http_builder(config: &ValidConfig) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.timeouts.request_header_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(Some(config.timeouts.keep_alive_interval));
    builder
}

/// After an accept failed: out of file descriptors, a pause (the error would repeat at once)
/// and one warning; any other error is the peer's (it reset before the accept) and ignored.
async fn pause_after_failed_accept(error: &std::io::Error, logged: &mut bool) {
    if is_out_of_files(error) {
        if !*logged {
            tracing::warn!(%error, "out of file descriptors; lower limits.max_http_connections");
            *logged = true;
        }
        tokio::time::sleep(OUT_OF_FILES_PAUSE).await;
    }
}

/// A socket the gate let in, with what serving it needs.
struct Accepted<S> {
    builder: Builder<TokioExecutor>,
    stream: Counted,
    service: S,
    watcher: hyper_util::server::graceful::Watcher,
    activity: Arc<Activity>,
    idle_limit: Duration,
}

impl<S> Accepted<S>
where
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response,
            Error = Infallible,
            Future = RequestFuture,
        > + Clone
        + Send
        + 'static,
{
    /// Serves the socket, over TLS with `tls` once its handshake is done.
    async fn serve(self, peer: SocketAddr, tls: Option<TlsAcceptor>, metrics: Arc<Metrics>) {
        let Accepted {
            builder,
            stream,
            service,
            watcher,
            activity,
            idle_limit,
        } = self;
        let Some(tls) = tls else {
            let io = TokioIo::new(stream);
            return serve_socket(builder, io, service, watcher, activity, idle_limit).await;
        };
        // Bounded like a request's headers: a peer that stalls the handshake holds only its
        // own socket (and its place in the gate) for that long, or until it gives way.
        let handshake = tokio::time::timeout(idle_limit, tls.accept(stream));
        let reason = match activity.unless_evicted(handshake).await {
            None => return,
            Some(Ok(Ok(stream))) => {
                let io = TokioIo::new(stream);
                return serve_socket(builder, io, service, watcher, activity, idle_limit).await;
            }
            Some(Ok(Err(error))) => {
                tracing::debug!(%peer, %error, "TLS handshake failed");
                "error"
            }
            Some(Err(_)) => "timeout",
        };
        metrics
            .tls_handshake_failures
            .get_or_create(&ReasonLabel { reason })
            .inc();
    }
}

/// Serves HTTP on one socket (plain or TLS) until it closes, is idle too long, or shutdown
/// ends it.
async fn serve_socket<I, S>(
    builder: Builder<TokioExecutor>,
    io: TokioIo<I>,
    service: S,
    watcher: hyper_util::server::graceful::Watcher,
    activity: Arc<Activity>,
    idle_limit: Duration,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            Request<Incoming>,
            Response = Response,
            Error = Infallible,
            Future = RequestFuture,
        > + Clone
        + Send
        + 'static,
{
    let connection = builder.serve_connection_with_upgrades(io, service);
    let connection = watcher.watch(connection);
    tokio::pin!(connection);
    // Once the connection has run, what the peer had sent was read (a complete request is
    // in progress by then), so an idle socket may give way.
    let mut serving = std::future::poll_fn(|cx| {
        let poll = connection.as_mut().poll(cx);
        activity.mark_read();
        poll
    });
    let evicted = activity.close.notified();
    tokio::pin!(evicted);
    // Dropping the connection closes a socket that has been idle too long or gave way.
    loop {
        let check_at = activity.idle_deadline(idle_limit);
        tokio::select! {
            biased;
            _ = &mut serving => break,
            _ = &mut evicted => break,
            _ = tokio::time::sleep_until(check_at) => {
                if activity.idle_for(idle_limit) {
                    break;
                }
            }
        }
    }
}

/// A socket and its place in the gate, given up when the socket closes: after the HTTP
/// connection ends, or, for a WebSocket, when the upgraded stream is dropped.
struct Counted {
    stream: TcpStream,
    _ticket: Ticket,
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Requests of one socket in progress (a response's body counts until it ends), when the
/// last one began or ended, and whether the socket may give way to a new one.
struct Activity {
    in_flight: AtomicUsize,
    since: tokio::time::Instant,
    /// Milliseconds after `since`.
    last_ms: AtomicU64,
    /// The socket's task has read it: a socket accepted a moment ago is not taken for a
    /// silent one before its first bytes had a chance to be read.
    read: AtomicBool,
    /// Answered 101: the socket is handed over (a WebSocket) and never gives way.
    upgraded: AtomicBool,
    /// Told to close to make room; `close` wakes its task.
    evicted: AtomicBool,
    close: Notify,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            in_flight: AtomicUsize::new(0),
            since: tokio::time::Instant::now(),
            last_ms: AtomicU64::new(0),
            read: AtomicBool::new(false),
            upgraded: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
        }
    }

    fn mark_read(&self) {
        if !self.read.load(Ordering::Relaxed) {
            self.read.store(true, Ordering::Release);
        }
    }

    /// Tells the socket to close if it is doing nothing (read, no request in progress, not
    /// handed over); true when it was told.
    fn evict(&self) -> bool {
        let idle = self.read.load(Ordering::Acquire)
            && self.in_flight.load(Ordering::Acquire) == 0
            && !self.upgraded.load(Ordering::Acquire);
        if !idle || self.evicted.swap(true, Ordering::AcqRel) {
            return false;
        }
        self.close.notify_one();
        true
    }

    /// Runs `work` (a TLS handshake) unless the socket is told to close first (`None`).
    async fn unless_evicted<F: Future>(&self, work: F) -> Option<F::Output> {
        let evicted = self.close.notified();
        tokio::pin!(work, evicted);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(output) = work.as_mut().poll(cx) {
                return Poll::Ready(Some(output));
            }
            self.mark_read();
            evicted.as_mut().poll(cx).map(|()| None)
        })
        .await
    }

    fn touch(&self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Release);
    }

    fn last(&self) -> tokio::time::Instant {
        self.since + Duration::from_millis(self.last_ms.load(Ordering::Acquire))
    }

    /// When the socket would have been idle for `limit`.
    fn idle_deadline(&self, limit: Duration) -> tokio::time::Instant {
        let deadline = self.last() + limit;
        deadline.max(tokio::time::Instant::now() + Duration::from_millis(10))
    }

    /// No request in progress, and none for `limit`.
    fn idle_for(&self, limit: Duration) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0 && self.last().elapsed() >= limit
    }

    fn begin(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.touch();
        InFlight(self.clone())
    }
}

/// One request in progress; ends when its response body is done (or dropped).
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request in progress until it ends.
struct TrackedBody {
    inner: axum::body::Body,
    _in_flight: InFlight,
}

impl http_body::Body for TrackedBody {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The routes as one socket's service: every request carries the peer address, and a socket
/// in the reserve gets only the reserved paths.
fn service(
    peer: SocketAddr,
    router: HttpRouter,
    reserved: bool,
    metrics: Arc<Metrics>,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    Request<Incoming>,
    Response = Response,
    Error = Infallible,
    Future = RequestFuture,
> + Clone {
    hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let router = router.clone();
        let metrics = metrics.clone();
        let activity = activity.clone();
        let in_flight = activity.begin();
        Box::pin(async move {
            if reserved
                && !RESERVED_PATHS
                    .iter()
                    .any(|p| request.uri().path().starts_with(p))
            {
                metrics
                    .http_connections_refused
                    .get_or_create(&ReasonLabel { reason: "reserved" })
                    .inc();
                return Ok::<_, Infallible>(busy());
            }
            request.extensions_mut().insert(ConnectInfo(peer));
            let response = router.oneshot(request.map(axum::body::Body::new)).await?;
            if response.status() == StatusCode::SWITCHING_PROTOCOLS {
                activity.upgraded.store(true, Ordering::Release);
            }
            Ok(response.map(|inner| {
                axum::body::Body::new(TrackedBody {
                    inner,
                    _in_flight: in_flight,
                })
            }))
        }) as RequestFuture
    })
}

type RequestFuture = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

/// The answer on a socket in the reserve: the service is at its socket limit.
fn busy() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::RETRY_AFTER, "5"),
            (header::CONNECTION, "close"),
        ],
        "the service is at its limit of open connections (limits.max_http_connections); try again later",
    )
        .into_response()
}

fn is_out_of_files(error: &std::io::Error) -> bool {
    // EMFILE (process) and ENFILE (system).
    matches!(error.raw_os_error(), Some(24) | Some(23))
}
