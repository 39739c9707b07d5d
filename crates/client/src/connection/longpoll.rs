//! Long polling: a task polls in a loop and turns each answer into a read; sends are POSTs.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::mpsc;
use url::Url;

use super::{
    authorized, unexpected, AbortOnDrop, HttpIo, CHANNEL_CAPACITY, POLL_TIMEOUT, REQUEST_TIMEOUT,
};
use crate::ClientError;

/// The first poll (answered at once: it starts the transport), then a task that polls.
pub(super) async fn start(
    client: reqwest::Client,
    url: Url,
    token: Option<String>,
) -> Result<HttpIo, ClientError> {
    let response = authorized(client.get(poll_url(&url)), token.as_deref())
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await?;
    let status = response.status().as_u16();
    let body = response.bytes().await?;
    if status != 200 {
        return Err(unexpected(
            "the first poll (GET)",
            status,
            &String::from_utf8_lossy(&body),
        ));
    }
    let (tx, incoming) = mpsc::channel(CHANNEL_CAPACITY);
    if !body.is_empty() {
        let _ = tx.try_send(Ok(body));
    }
    let reader = AbortOnDrop(tokio::spawn(poll(
        client.clone(),
        url.clone(),
        token.clone(),
        tx,
    )));
    Ok(HttpIo {
        client,
        url,
        token,
        incoming,
        reader,
    })
}

/// Polls until the server answers 204 (closed), the connection is dropped, or an error.
async fn poll(
    client: reqwest::Client,
    url: Url,
    token: Option<String>,
    tx: mpsc::Sender<Result<Bytes, ClientError>>,
) {
    loop {
        let request =
            authorized(client.get(poll_url(&url)), token.as_deref()).timeout(POLL_TIMEOUT);
        let result = match request.send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(body) => Ok((status, body)),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        let delivery = match result {
            Ok((200, body)) if body.is_empty() => continue,
            Ok((200, body)) => Ok(body),
            Ok((204, _)) => return,
            Ok((status, body)) => Err(unexpected(
                "a poll (GET)",
                status,
                &String::from_utf8_lossy(&body),
            )),
            // Nothing came within our own poll timeout: poll again.
            Err(e) if e.is_timeout() => continue,
            Err(e) => Err(e.into()),
        };
        let failed = delivery.is_err();
        if tx.send(delivery).await.is_err() || failed {
            return;
        }
    }
}

/// The poll URL with the clients' cache-buster `_=<epoch ms>`.
fn poll_url(url: &Url) -> Url {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut url = url.clone();
    url.query_pairs_mut().append_pair("_", &ms.to_string());
    url
}
