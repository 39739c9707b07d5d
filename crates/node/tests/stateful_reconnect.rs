//! Stateful reconnect over raw WebSockets against a real node on port 0: the takeover of a
//! connection whose first socket is still open, the replay, and the refusal of bad Acks. (The
//! official clients' view, with sockets cut under traffic, is in tests/e2e and tests/browser.)

mod common;

use common::{within, RawClient, TestServer, WAIT};
use futures_util::StreamExt;
use serde_json::{json, Value};
use switchyard_hub_protocol::{encode_ack, encode_sequence, handshake, Format, HubMessage};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// Negotiates asking for stateful reconnect; returns the body.
async fn negotiate(server: &TestServer, hub: &str, token: &str, ask: bool) -> Value {
    let query = if ask {
        "&useStatefulReconnect=true"
    } else {
        ""
    };
    reqwest::Client::new()
        .post(format!(
            "http://{}/client/negotiate?hub={hub}&negotiateVersion=1{query}",
            server.addr
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Opens the connection's WebSocket; with `handshake_version`, sends the handshake and reads
/// its response.
async fn open(
    server: &TestServer,
    hub: &str,
    id: &str,
    token: &str,
    handshake_version: Option<u32>,
) -> RawClient {
    let mut request = server.ws_url(hub, Some(id)).into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    let (ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    let mut client = RawClient::from_socket(ws, Format::Json);
    if let Some(version) = handshake_version {
        client
            .send_raw(&handshake::encode_request("json", version))
            .await;
        client.handshake_result().await.unwrap();
    }
    client
}

fn number(message: HubMessage<Value>) -> i64 {
    match message {
        HubMessage::Invocation { arguments, .. } => arguments[0].as_i64().unwrap(),
        other => panic!("expected an invocation, got {other:?}"),
    }
}

#[tokio::test]
async fn negotiate_offers_it_first_and_only_when_asked() {
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    let asked = negotiate(&server, "chat", &token, true).await;
    let first = asked.as_object().unwrap().keys().next().unwrap().clone();
    assert_eq!(first, "useStatefulReconnect");
    assert_eq!(asked["useStatefulReconnect"], json!(true));
    let plain = negotiate(&server, "chat", &token, false).await;
    assert!(plain.get("useStatefulReconnect").is_none());
}

#[tokio::test]
async fn a_new_socket_takes_over_from_one_still_open_and_gets_what_was_not_acknowledged() {
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    let body = negotiate(&server, "chat", &token, true).await;
    let id = body["connectionToken"].as_str().unwrap().to_string();
    let mut first = open(&server, "chat", &id, &token, Some(2)).await;
    for n in 1..=3 {
        server.broadcast("chat", "n", &[json!(n)]);
    }
    for n in 1..=3 {
        assert_eq!(number(first.next_message().await), n);
    }
    first.send_raw(&encode_ack(Format::Json, 2)).await;
    // Let the Ack be read before the second socket claims the connection.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;

    // The second socket: no handshake; Sequence first, then message 3 (not acknowledged).
    let mut second = open(&server, "chat", &id, &token, None).await;
    assert_eq!(
        second.next_message().await,
        HubMessage::Sequence { sequence_id: 3 }
    );
    assert_eq!(number(second.next_message().await), 3);
    second.send_raw(&encode_sequence(Format::Json, 1)).await;
    server.broadcast("chat", "n", &[json!(4)]);
    assert_eq!(number(second.next_message().await), 4);
    // The first socket was let go.
    within("the first socket to end", WAIT, async {
        while let Some(Ok(_)) = first.ws.next().await {}
    })
    .await;
    assert_eq!(server.node.client_connection_count(), 1);

    // An Ack beyond what was sent is a protocol error.
    second.send_raw(&encode_ack(Format::Json, 99)).await;
    match second.until_closed().await {
        Some(HubMessage::Close { error, .. }) => {
            assert_eq!(
                error.as_deref(),
                Some("Connection closed with an error. protocol error: Ack of message 99, but 4 were sent.")
            )
        }
        other => panic!("expected a Close, got {other:?}"),
    }
}

#[tokio::test]
async fn a_version_1_handshake_or_no_offer_means_no_stateful_reconnect() {
    let server = TestServer::start().await;
    let token = server.token("chat", None);
    // Offered, but the client handshakes with version 1: a second socket is refused (409),
    // as for any connection with a socket open.
    let body = negotiate(&server, "chat", &token, true).await;
    let id = body["connectionToken"].as_str().unwrap().to_string();
    let _first = open(&server, "chat", &id, &token, Some(1)).await;
    let mut request = server
        .ws_url("chat", Some(&id))
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            assert_eq!(response.status(), 409)
        }
        other => panic!("expected 409, got {other:?}"),
    }
    // Not offered, version 2: Acks are not taken (a plain connection ignores them).
    let body = negotiate(&server, "chat", &token, false).await;
    let id = body["connectionToken"].as_str().unwrap().to_string();
    let mut plain = open(&server, "chat", &id, &token, Some(2)).await;
    plain.send_raw(&encode_ack(Format::Json, 99)).await;
    server.broadcast("chat", "n", &[json!(1)]);
    assert_eq!(number(plain.next_message().await), 1);
}
