//! [`Http`]: long-polling and Server-Sent Events requests of the client endpoint, raw.

use std::time::Duration;

use crate::TestServer;

/// A JSON hub-protocol handshake request.
pub const HANDSHAKE_JSON: &[u8] = b"{\"protocol\":\"json\",\"version\":1}\x1e";

/// Long-polling and SSE requests of one hub's client endpoint, as one user.
pub struct Http {
    pub client: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl Http {
    pub fn new(server: &TestServer, hub: &str) -> Http {
        Http::for_user(server, hub, "u1")
    }

    pub fn for_user(server: &TestServer, hub: &str, user: &str) -> Http {
        Http {
            client: reqwest::Client::new(),
            base: server.client_url(hub),
            token: server.token(hub, Some(user)),
        }
    }

    pub async fn negotiate(&self) -> String {
        switchyard_client::negotiate(&self.base, &self.token, 1)
            .await
            .unwrap()
            .id_value
    }

    /// Negotiates, starts long polling, completes a JSON handshake and reads its response.
    pub async fn open_long_polling(&self) -> String {
        let id = self.negotiate().await;
        assert_eq!(self.poll(&id).await.status(), 200);
        assert_eq!(self.post(&id, HANDSHAKE_JSON).await.status(), 200);
        assert_eq!(&self.poll(&id).await.bytes().await.unwrap()[..], b"{}\x1e");
        id
    }

    /// Starts a poll and goes away while it is pending, as a client that aborts it does.
    pub async fn abandon_poll(&self, id: &str) {
        let pending = tokio::spawn({
            let client = self.client.clone();
            let url = self.url(id);
            let token = self.token.clone();
            async move { client.get(url).bearer_auth(token).send().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        pending.abort();
    }

    /// `GET {base}?id=` asking for an event stream.
    pub async fn open_sse(&self, id: &str) -> reqwest::Response {
        self.client
            .get(self.url(id))
            .bearer_auth(&self.token)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap()
    }

    pub fn url(&self, id: &str) -> String {
        format!("{}&id={id}", self.base)
    }

    pub async fn poll(&self, id: &str) -> reqwest::Response {
        self.client
            .get(self.url(id))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    pub async fn post(&self, id: &str, body: &[u8]) -> reqwest::Response {
        self.client
            .post(self.url(id))
            .bearer_auth(&self.token)
            .body(body.to_vec())
            .send()
            .await
            .unwrap()
    }

    pub async fn delete(&self, id: &str) -> reqwest::Response {
        self.client
            .delete(self.url(id))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }
}
