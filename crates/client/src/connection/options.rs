//! How to connect: the transports, [`ConnectOptions`], and the HTTP client SignalR needs.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use switchyard_hub_protocol::Format;

#[cfg(doc)]
use super::Connection;
use super::{
    CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_STATEFUL_BUFFER_SIZE,
    DEFAULT_STATEFUL_RECONNECT_WINDOW,
};
use crate::TlsRoots;

/// The three SignalR transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    WebSockets,
    ServerSentEvents,
    LongPolling,
}

impl Transport {
    /// Every transport, in the order negotiate lists them.
    pub const ALL: [Transport; 3] = [
        Transport::WebSockets,
        Transport::ServerSentEvents,
        Transport::LongPolling,
    ];

    /// The name in negotiate's `availableTransports`.
    pub fn name(self) -> &'static str {
        match self {
            Transport::WebSockets => "WebSockets",
            Transport::ServerSentEvents => "ServerSentEvents",
            Transport::LongPolling => "LongPolling",
        }
    }
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::WebSockets => "websockets",
            Transport::ServerSentEvents => "serversentevents",
            Transport::LongPolling => "longpolling",
        })
    }
}

impl FromStr for Transport {
    type Err = String;

    /// `websockets`/`ws`, `serversentevents`/`sse`, `longpolling`/`lp`, any case.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.to_ascii_lowercase().as_str() {
            "websockets" | "ws" => Ok(Transport::WebSockets),
            "serversentevents" | "sse" => Ok(Transport::ServerSentEvents),
            "longpolling" | "lp" => Ok(Transport::LongPolling),
            _ => Err(format!(
                "'{text}' is not a transport (expected websockets|ws, serversentevents|sse or longpolling|lp)"
            )),
        }
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub transport: Transport,
    pub format: Format,
    /// Bearer token for negotiate (and everything after it unless a redirect brings its own
    /// `accessToken`, which then replaces it).
    pub access_token: Option<String>,
    /// Source address for every socket. The WebSocket is bound here; HTTP requests go
    /// through [`ConnectOptions::http`] when given (build it with
    /// [`http_client`]`(local_address)` so that it binds too), else through a client built
    /// with that address.
    pub local_address: Option<IpAddr>,
    /// HTTP client for negotiate, the event stream, polls and sends. Share one between
    /// connections: a client per connection means a connection pool per connection.
    pub http: Option<reqwest::Client>,
    /// Certificate authorities trusted for https and wss, beyond the public roots. The
    /// WebSocket always uses them; HTTP requests only when [`ConnectOptions::http`] is unset
    /// (else build that client with [`http_client_trusting`]).
    pub tls_roots: TlsRoots,
    /// Largest hub message accepted (body bytes, framing excluded).
    pub max_message_size: usize,
    /// Stateful reconnect (the official clients' `withStatefulReconnect()`), WebSockets only;
    /// ignored for the other transports. See the module documentation.
    pub stateful_reconnect: bool,
    /// Unacknowledged bytes the connection expects to keep for replay. Sends never wait:
    /// the connection has no task that could read the server's Acks while a send waits, so
    /// past this it keeps buffering and [`Connection::stateful_is_full`] says so. The server
    /// acknowledges every second, but its Acks are only taken in by
    /// [`Connection::next_frame`]: a caller that sends without reading keeps everything.
    pub stateful_buffer_size: usize,
    /// How long after a drop a new socket is tried before the connection fails.
    pub stateful_reconnect_window: Duration,
}

impl ConnectOptions {
    pub fn new(transport: Transport, format: Format) -> Self {
        ConnectOptions {
            transport,
            format,
            access_token: None,
            local_address: None,
            http: None,
            tls_roots: TlsRoots::default(),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            stateful_reconnect: false,
            stateful_buffer_size: DEFAULT_STATEFUL_BUFFER_SIZE,
            stateful_reconnect_window: DEFAULT_STATEFUL_RECONNECT_WINDOW,
        }
    }
}

impl Default for ConnectOptions {
    /// WebSockets, JSON, no token, no bound address.
    fn default() -> Self {
        ConnectOptions::new(Transport::WebSockets, Format::Json)
    }
}

/// An HTTP client for SignalR: pooled keep-alive connections, `TCP_NODELAY`, no proxy,
/// [`CONNECT_TIMEOUT`], sockets bound to `local_address` when given. No overall request
/// timeout (event streams and polls are long); requests that should end set their own.
pub fn http_client(local_address: Option<IpAddr>) -> reqwest::Client {
    http_client_trusting(local_address, &TlsRoots::default())
}

/// [`http_client`] trusting `roots` for https.
pub fn http_client_trusting(local_address: Option<IpAddr>, roots: &TlsRoots) -> reqwest::Client {
    roots
        .apply(reqwest::Client::builder())
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(CONNECT_TIMEOUT)
        // Below the service's idle keep-alive limit (timeouts.request_header_timeout, 10 s):
        // a pooled connection the server is closing at the moment of reuse fails the
        // request ("connection closed before message completed"), and a POST such as
        // negotiate is not retried.
        .pool_idle_timeout(Duration::from_secs(5))
        // A load generator negotiating thousands of connections at once would otherwise keep
        // as many idle keep-alive sockets open at the server, each a file descriptor there.
        .pool_max_idle_per_host(64)
        .local_address(local_address)
        .build()
        .expect("an HTTP client with these settings always builds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names() {
        for (text, transport) in [
            ("websockets", Transport::WebSockets),
            ("WS", Transport::WebSockets),
            ("ServerSentEvents", Transport::ServerSentEvents),
            ("sse", Transport::ServerSentEvents),
            ("LongPolling", Transport::LongPolling),
            ("lp", Transport::LongPolling),
        ] {
            assert_eq!(text.parse::<Transport>(), Ok(transport));
        }
        assert!("http".parse::<Transport>().is_err());
        assert_eq!(Transport::ServerSentEvents.to_string(), "serversentevents");
        assert_eq!(Transport::LongPolling.name(), "LongPolling");
        for t in Transport::ALL {
            assert_eq!(t.to_string().parse::<Transport>(), Ok(t));
        }
    }
}
