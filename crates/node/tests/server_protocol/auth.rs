//! Auth.

use super::*;

#[tokio::test]
async fn upgrade_requires_a_valid_server_token() {
    let server = TestServer::start().await;
    let key = server.key();
    let hub = "chat";

    assert_eq!(
        refused_status(dial(&server, hub, None, Some("s1")).await),
        401
    );

    let client_audience = TokenBuilder::new(server.client_url(hub))
        .claim("nameid", "s1")
        .sign(&key, now());
    assert_eq!(
        refused_status(dial(&server, hub, Some(&client_audience), Some("s1")).await),
        401
    );

    let expired = TokenBuilder::new(server.server_audience(hub))
        .claim("nameid", "s1")
        .lifetime(Duration::from_secs(3600))
        .sign(&key, now() - 7200);
    assert_eq!(
        refused_status(dial(&server, hub, Some(&expired), Some("s1")).await),
        401
    );

    let other_hub = server.server_token("other", "s1");
    assert_eq!(
        refused_status(dial(&server, hub, Some(&other_hub), Some("s1")).await),
        401
    );

    let wrong_key = TokenBuilder::new(server.server_audience(hub))
        .claim("nameid", "s1")
        .sign("not-the-key-not-the-key-not-the-key-0123", now());
    assert_eq!(
        refused_status(dial(&server, hub, Some(&wrong_key), Some("s1")).await),
        401
    );

    // The SDK's audience has no port; one with the port is accepted too.
    let without_port = server.server_token(hub, "s1");
    let ws = dial(&server, hub, Some(&without_port), Some("s1"))
        .await
        .expect("audience without port");
    let mut app = AppServer::new(ws);
    assert_eq!(app.handshake(handshake_request(0)).await.error_message, "");

    let with_port = TokenBuilder::new(format!("http://{}/server/?hub={hub}", server.addr))
        .claim("nameid", "s2")
        .sign(&key, now());
    let ws = dial(&server, hub, Some(&with_port), Some("s2"))
        .await
        .expect("audience with port");
    let mut app = AppServer::new(ws);
    assert_eq!(app.handshake(handshake_request(0)).await.error_message, "");
    eventually("both connections registered", WAIT, || {
        server.node.server_connection_count() == 2
    })
    .await;
}

#[tokio::test]
async fn the_server_id_is_the_tokens_and_a_differing_header_is_refused() {
    let server = TestServer::start().await;
    let hub = "chat";
    // A header naming another server than the token does is refused (audit, low: the header
    // used to win, so one server's token could pose as another server).
    let token = server.server_token(hub, "from-token");
    let refused = dial(&server, hub, Some(&token), Some("from-header")).await;
    assert_eq!(refused_status(refused), 401);
    // The header repeating the token's nameid, as the SDK sends it.
    let mut first = AppServer::new(
        dial(&server, hub, Some(&token), Some("from-token"))
            .await
            .unwrap(),
    );
    assert_eq!(
        first.handshake(handshake_request(0)).await.error_message,
        ""
    );
    // No header: the token's nameid.
    let token = server.server_token(hub, "only-token");
    let mut second = AppServer::new(dial(&server, hub, Some(&token), None).await.unwrap());
    assert_eq!(
        second.handshake(handshake_request(0)).await.error_message,
        ""
    );
    // A token without nameid: the header names the server.
    let bare =
        switchyard_auth::TokenBuilder::new(server.server_audience(hub)).sign(&server.key(), now());
    let mut third = AppServer::new(
        dial(&server, hub, Some(&bare), Some("only-header"))
            .await
            .unwrap(),
    );
    assert_eq!(
        third.handshake(handshake_request(0)).await.error_message,
        ""
    );

    first.send(Ping::new(&[("servers", "")])).await;
    let reply = first.ping("servers").await;
    let list = reply.get("servers").unwrap();
    let (_ticks, ids) = list.split_once(':').expect("<ticks>:<ids>");
    let mut ids: Vec<&str> = ids.split(';').collect();
    ids.sort();
    assert_eq!(ids, ["from-token", "only-header", "only-token"]);
}
