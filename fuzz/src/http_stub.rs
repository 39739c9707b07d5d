//! A scripted HTTP/1.1 server on 127.0.0.1 for the targets whose parser reads an HTTP
//! answer (`upstream_reply`, `client_negotiate`): every request is read whole and answered
//! by the script, with the body written the way the script says (one write with
//! `Content-Length`, two chunks, or two writes with `Content-Length`, or ended by closing the
//! connection), then the connection is closed.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a response body goes on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `Content-Length`, one write.
    Whole,
    /// `Transfer-Encoding: chunked`, two chunks cut at the position (an empty one left out).
    Chunked(usize),
    /// `Content-Length`, written in two writes cut at the position.
    Halves(usize),
    /// No length: the body ends when the connection closes, written in two writes.
    UntilClose(usize),
}

/// One request as the server read it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// The request line: method, target (absolute-form through a proxy), version.
    pub line: String,
    /// Header names lower-cased, with their values.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The request target (path and query, or the absolute URL through a proxy).
    pub(crate) fn target(&self) -> &str {
        self.line.split(' ').nth(1).unwrap_or_default()
    }
}

/// The answer to one request: status, extra headers, body and its framing.
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub framing: Framing,
}

pub(crate) type Script = Arc<dyn Fn(&Seen) -> Reply + Send + Sync>;

/// A running stub: its port and every request it read.
pub(crate) struct Stub {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

/// Starts the stub on the current runtime; it serves until the runtime ends.
pub(crate) async fn start(script: Script) -> Stub {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (script, log) = (script.clone(), log.clone());
            tokio::spawn(async move { serve(socket, script, log).await });
        }
    });
    Stub { port, seen }
}

async fn serve(mut socket: TcpStream, script: Script, log: Arc<Mutex<Vec<Seen>>>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let reply = script(&request);
    log.lock().push(request);
    let _ = write_reply(&mut socket, &reply).await;
    let _ = socket.shutdown().await;
}

async fn read_request(socket: &mut TcpStream) -> Option<Seen> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 || buffer.len() > 1 << 20 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let line = lines.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Some(Seen {
        line,
        headers,
        body,
    })
}

async fn write_reply(socket: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} Stub\r\nconnection: close\r\n", reply.status);
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    let body = &reply.body[..];
    let cut = |at: usize| body.split_at(at.min(body.len()));
    match reply.framing {
        Framing::Whole => {
            head.push_str(&format!("content-length: {}\r\n\r\n", body.len()));
            let mut out = head.into_bytes();
            out.extend_from_slice(body);
            socket.write_all(&out).await?;
        }
        Framing::Chunked(at) => {
            head.push_str("transfer-encoding: chunked\r\n\r\n");
            socket.write_all(head.as_bytes()).await?;
            let (first, second) = cut(at);
            for piece in [first, second].into_iter().filter(|p| !p.is_empty()) {
                socket
                    .write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                    .await?;
                socket.write_all(piece).await?;
                socket.write_all(b"\r\n").await?;
                socket.flush().await?;
            }
            socket.write_all(b"0\r\n\r\n").await?;
        }
        Framing::Halves(at) | Framing::UntilClose(at) => {
            if let Framing::Halves(_) = reply.framing {
                head.push_str(&format!("content-length: {}\r\n", body.len()));
            }
            head.push_str("\r\n");
            socket.write_all(head.as_bytes()).await?;
            let (first, second) = cut(at);
            socket.write_all(first).await?;
            socket.flush().await?;
            socket.write_all(second).await?;
        }
    }
    socket.flush().await
}
