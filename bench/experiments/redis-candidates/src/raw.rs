//! Baseline, not a candidate: hand-written RESP over a tokio `TcpStream`. No reconnect, no
//! timeouts, no TLS; only the ceiling of what the same socket work costs.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{Stats, CHANNEL};

fn put_bulk(out: &mut Vec<u8>, data: &[u8]) {
    out.extend_from_slice(format!("${}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

fn put_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        put_bulk(out, a);
    }
}

/// Position just past the next CRLF at or after `from`.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i + 2)
}

fn number(buf: &[u8], from: usize, end: usize) -> i64 {
    std::str::from_utf8(&buf[from..end - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1)
}

/// Skips one RESP2/RESP3 value starting at `pos`; None if it is not complete yet.
fn skip(buf: &[u8], pos: usize) -> Option<usize> {
    let kind = *buf.get(pos)?;
    let end = line_end(buf, pos)?;
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Some(end),
        b'$' | b'=' | b'!' => {
            let n = number(buf, pos + 1, end);
            if n < 0 {
                return Some(end);
            }
            let stop = end + n as usize + 2;
            (buf.len() >= stop).then_some(stop)
        }
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let n = number(buf, pos + 1, end);
            let items = if kind == b'%' || kind == b'|' { n * 2 } else { n };
            let mut p = end;
            for _ in 0..items.max(0) {
                p = skip(buf, p)?;
            }
            if kind == b'|' {
                return skip(buf, p); // an attribute precedes the value it describes
            }
            Some(p)
        }
        _ => Some(end), // not expected from Redis; skip the line
    }
}

/// If the value at `pos` is a `message` push (`>3` message, channel, payload), the payload's
/// range.
fn message_payload(buf: &[u8], pos: usize, end: usize) -> Option<(usize, usize)> {
    const HEAD: &[u8] = b">3\r\n$7\r\nmessage\r\n";
    if !buf[pos..end].starts_with(HEAD) {
        return None;
    }
    let channel = skip(buf, pos + HEAD.len())?;
    let len_end = line_end(buf, channel)?;
    let n = number(buf, channel + 1, len_end) as usize;
    Some((len_end, len_end + n))
}

pub struct Pub {
    stream: TcpStream,
    out: Vec<u8>,
    input: BytesMut,
}

impl Pub {
    pub async fn connect(port: u16) -> Result<Self, String> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        Ok(Pub {
            stream,
            out: Vec::with_capacity(1 << 16),
            input: BytesMut::with_capacity(1 << 14),
        })
    }

    async fn send(&mut self, messages: &[Bytes]) -> Result<Vec<i64>, String> {
        self.out.clear();
        for m in messages {
            put_command(&mut self.out, &[b"PUBLISH", CHANNEL.as_bytes(), m]);
        }
        self.stream
            .write_all(&self.out)
            .await
            .map_err(|e| e.to_string())?;
        let mut replies = Vec::with_capacity(messages.len());
        let mut pos = 0;
        while replies.len() < messages.len() {
            match line_end(&self.input, pos) {
                Some(end) => {
                    if self.input[pos] != b':' {
                        return Err(String::from_utf8_lossy(&self.input[pos..end]).into());
                    }
                    replies.push(number(&self.input, pos + 1, end));
                    pos = end;
                }
                None => {
                    let _ = self.input.split_to(pos);
                    pos = 0;
                    if self.stream.read_buf(&mut self.input).await.map_err(|e| e.to_string())? == 0 {
                        return Err("connection closed".into());
                    }
                }
            }
        }
        let _ = self.input.split_to(pos);
        Ok(replies)
    }

    pub async fn batch(&mut self, messages: &[Bytes]) -> Result<(), String> {
        self.send(messages).await.map(|_| ())
    }

    pub async fn one(&mut self, message: Bytes) -> Result<i64, String> {
        Ok(self.send(&[message]).await?[0])
    }
}

pub struct Sub {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Sub {
    pub async fn connect(port: u16, stats: Arc<Stats>) -> Result<Self, String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        put_command(&mut out, &[b"HELLO", b"3"]);
        put_command(&mut out, &[b"SUBSCRIBE", CHANNEL.as_bytes()]);
        stream.write_all(&out).await.map_err(|e| e.to_string())?;
        // Wait for the HELLO map and the subscribe confirmation.
        let mut buf = BytesMut::with_capacity(1 << 16);
        let mut pos = 0;
        let mut answers = 0;
        while answers < 2 {
            match skip(&buf, pos) {
                Some(end) => {
                    pos = end;
                    answers += 1;
                }
                None => {
                    if stream.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                        return Err("connection closed".into());
                    }
                }
            }
        }
        let _ = buf.split_to(pos);
        let task = tokio::spawn(async move {
            let mut pos = 0;
            loop {
                while let Some(end) = skip(&buf, pos) {
                    if let Some((a, b)) = message_payload(&buf, pos, end) {
                        stats.on_message(&buf[a..b]);
                    }
                    pos = end;
                }
                let _ = buf.split_to(pos);
                pos = 0;
                if buf.capacity() - buf.len() < 4096 {
                    buf.reserve(1 << 16);
                }
                match stream.read_buf(&mut buf).await {
                    Ok(n) if n > 0 => {}
                    _ => return,
                }
            }
        });
        Ok(Sub { task })
    }
}
