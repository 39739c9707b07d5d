//! The WebSocket transport: a TCP connection from a chosen source address, without Nagle,
//! and a small read buffer; TLS for wss.

use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use reqwest::header::HeaderValue;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;
use url::Url;

use super::{CONNECT_TIMEOUT, DEFAULT_MAX_MESSAGE_SIZE, WS_READ_BUFFER};
use crate::{ClientError, TlsRoots};

pub(super) async fn open(
    target: &Url,
    token: Option<&str>,
    local_address: Option<IpAddr>,
    max_message_size: usize,
    tls_roots: &TlsRoots,
) -> Result<WebSocketStream<Stream>, ClientError> {
    let mut url = target.clone();
    url.set_fragment(None);
    let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
    url.set_scheme(scheme)
        .map_err(|()| ClientError::Protocol(format!("cannot make a {scheme}:// URL of '{url}'")))?;
    let tcp = tcp_connect(&url, local_address)
        .await
        .map_err(|e| ClientError::WebSocket(e.into()))?;
    let stream = if scheme == "wss" {
        let name = match url.host() {
            Some(url::Host::Domain(name)) => ServerName::try_from(name.to_owned())
                .map_err(|e| ClientError::Protocol(format!("host '{name}': {e}")))?,
            Some(url::Host::Ipv4(ip)) => ServerName::from(IpAddr::from(ip)),
            Some(url::Host::Ipv6(ip)) => ServerName::from(IpAddr::from(ip)),
            None => return Err(ClientError::Protocol(format!("'{url}' has no host"))),
        };
        let tls = tokio_rustls::TlsConnector::from(tls_roots.rustls())
            .connect(name, tcp)
            .await
            .map_err(|e| ClientError::WebSocket(e.into()))?;
        Stream::Tls(Box::new(tls))
    } else {
        Stream::Plain(tcp)
    };
    let mut request = url.as_str().into_client_request()?;
    if let Some(token) = token {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ClientError::Protocol("the access token is not a header value".into()))?;
        request.headers_mut().insert("authorization", value);
    }
    let config = WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        // Each message is written at once (a send flushes anyway).
        .write_buffer_size(0)
        .max_message_size(Some(max_message_size.max(DEFAULT_MAX_MESSAGE_SIZE)));
    let (socket, _) =
        tokio_tungstenite::client_async_with_config(request, stream, Some(config)).await?;
    Ok(socket)
}

/// A WebSocket's bytes: plain TCP, or TLS. The TLS state is boxed so that a plain
/// connection (the benchmark holds tens of thousands) stays as small as before.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// With a source address bound, Linux picks the port at `bind()`: one free on that address
/// for any destination, found by scanning the sockets already bound there. At ~17,000
/// connections per address that scan took most of a load generator's CPU (and ran out of
/// ports sooner). IP_BIND_ADDRESS_NO_PORT defers the choice to `connect()`, where only the
/// four-tuple must be unique. Best effort: without it the bind still works, only slower.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn defer_port_choice(socket: &TcpSocket) {
    use std::os::fd::AsRawFd;
    let on: libc::c_int = 1;
    // SAFETY: the descriptor is the open socket `socket` owns for this whole call, and the
    // option value is a c_int whose address and size are passed together.
    let _ = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_BIND_ADDRESS_NO_PORT,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn defer_port_choice(_: &TcpSocket) {}

/// A TCP connection to `url`'s host, from `local_address` if given, without Nagle.
async fn tcp_connect(url: &Url, local_address: Option<IpAddr>) -> std::io::Result<TcpStream> {
    use std::io::{Error, ErrorKind};
    let port = url
        .port_or_known_default()
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "the URL has no port"))?;
    let addrs: Vec<SocketAddr> = match url.host() {
        Some(url::Host::Ipv4(ip)) => vec![SocketAddr::new(ip.into(), port)],
        Some(url::Host::Ipv6(ip)) => vec![SocketAddr::new(ip.into(), port)],
        Some(url::Host::Domain(name)) => tokio::net::lookup_host((name, port)).await?.collect(),
        None => return Err(Error::new(ErrorKind::InvalidInput, "the URL has no host")),
    };
    let mut last_error = None;
    for addr in addrs {
        if local_address.is_some_and(|local| local.is_ipv4() != addr.is_ipv4()) {
            continue;
        }
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        if let Some(local) = local_address {
            defer_port_choice(&socket);
            socket.bind(SocketAddr::new(local, 0))?;
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr)).await {
            Ok(Ok(stream)) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Ok(Err(e)) => last_error = Some(e),
            Err(_) => {
                last_error = Some(Error::new(
                    ErrorKind::TimedOut,
                    format!("connecting to {addr} timed out"),
                ))
            }
        }
    }
    Err(last_error.unwrap_or_else(|| {
        Error::new(
            ErrorKind::AddrNotAvailable,
            format!(
                "no address of {} can be reached from {}",
                url.host_str().unwrap_or_default(),
                local_address.map(|a| a.to_string()).unwrap_or_default()
            ),
        )
    }))
}
