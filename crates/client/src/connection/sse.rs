//! Server-Sent Events: a reader task turns the event stream into reads; sends are POSTs.

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderValue, ACCEPT};
use tokio::sync::mpsc;
use url::Url;

use super::{authorized, unexpected, AbortOnDrop, HttpIo, CHANNEL_CAPACITY};
use crate::ClientError;

/// `GET {url}?id=` with `Accept: text/event-stream`; a task turns events into reads.
pub(super) async fn open(
    client: reqwest::Client,
    url: Url,
    token: Option<String>,
) -> Result<HttpIo, ClientError> {
    let request = authorized(client.get(url.clone()), token.as_deref())
        .header(ACCEPT, HeaderValue::from_static("text/event-stream"));
    let response = request.send().await?;
    let status = response.status().as_u16();
    if status != 200 {
        let body = response.text().await.unwrap_or_default();
        return Err(unexpected("the event stream (GET)", status, &body));
    }
    let (tx, incoming) = mpsc::channel(CHANNEL_CAPACITY);
    let reader = AbortOnDrop(tokio::spawn(read_events(response, tx)));
    Ok(HttpIo {
        client,
        url,
        token,
        incoming,
        reader,
    })
}

async fn read_events(
    mut response: reqwest::Response,
    tx: mpsc::Sender<Result<Bytes, ClientError>>,
) {
    let mut parser = EventParser::default();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                parser.feed(&chunk);
                while let Some(data) = parser.events.pop_front() {
                    if tx.send(Ok(data)).await.is_err() {
                        return;
                    }
                }
            }
            // The server ended the stream: the channel closes, reads see `Closed`.
            Ok(None) => return,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        }
    }
}

/// The `text/event-stream` format, as far as SignalR uses it: `data:` lines (joined with
/// `\n`), comments, blank line ends an event; other fields are ignored.
#[derive(Default)]
struct EventParser {
    /// An incomplete line.
    line: BytesMut,
    /// The data of the event being read.
    data: BytesMut,
    has_data: bool,
    /// Complete events' data.
    events: std::collections::VecDeque<Bytes>,
}

impl EventParser {
    fn feed(&mut self, mut chunk: &[u8]) {
        while let Some(end) = chunk.iter().position(|&b| b == b'\n') {
            if self.line.is_empty() {
                self.line_done(&chunk[..end]);
            } else {
                self.line.extend_from_slice(&chunk[..end]);
                let line = std::mem::take(&mut self.line);
                self.line_done(&line);
            }
            chunk = &chunk[end + 1..];
        }
        self.line.extend_from_slice(chunk);
    }

    fn line_done(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.has_data && !self.data.is_empty() {
                self.events.push_back(self.data.split().freeze());
            }
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if field == b"data" {
            if self.has_data {
                self.data.extend_from_slice(b"\n");
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_parser() {
        let mut parser = EventParser::default();
        let stream = b":\r\ndata: {\"type\":6}\x1e\r\n\r\ndata: a\r\ndata: b\r\n\r\n\r\nevent: x\ndata:c\n\n";
        // Byte by byte: lines and events may be cut anywhere.
        for b in stream.iter() {
            parser.feed(std::slice::from_ref(b));
        }
        let events: Vec<Bytes> = parser.events.drain(..).collect();
        assert_eq!(
            events,
            [
                Bytes::from_static(b"{\"type\":6}\x1e"),
                Bytes::from_static(b"a\nb"),
                Bytes::from_static(b"c"),
            ]
        );
    }
}
