//! Server connection loss and migration.

use super::*;

#[tokio::test]
async fn losing_a_server_connection_closes_only_its_clients() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut s1 = AppServer::open(&server, hub, "s1").await;
    let mut s2 = AppServer::open(&server, hub, "s2").await;
    let mut on_s1 = Vec::new();
    let mut on_s2 = Vec::new();
    for (i, format) in [Format::Json, Format::MessagePack].into_iter().enumerate() {
        let token = sticky_token(&server, hub, &format!("a{i}"), "s1");
        on_s1.push(connect_client(&server, &mut s1, hub, &token, format).await);
        let token = sticky_token(&server, hub, &format!("b{i}"), "s2");
        on_s2.push(connect_client(&server, &mut s2, hub, &token, format).await);
    }
    // Abruptly: no close frame.
    drop(s1);
    for (client, _) in on_s1.iter_mut() {
        match client.until_closed().await {
            Some(HubMessage::Close {
                allow_reconnect, ..
            }) => assert!(allow_reconnect),
            other => panic!("expected a Close, got {other:?}"),
        }
    }
    let msg = Msg::invocation("still", &[json!("here")]);
    s2.send(BroadcastData {
        excluded_list: Vec::new(),
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    for (client, id) in on_s2.iter_mut() {
        client.expect(&msg).await;
        let up = Msg::invocation("up", &[json!(id.clone())]);
        client.send_raw(&up.bytes(client.format)).await;
        assert_eq!(s2.connection_data(id).await, up.bytes(client.format));
    }
    eventually("s1's clients gone", WAIT, || {
        server.node.client_connection_count() == 2
    })
    .await;
}

#[tokio::test]
async fn with_migration_a_lost_connection_moves_clients_to_a_sibling() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open_with(&server, hub, "srv", 1).await;
    let token = server.token(hub, Some("mover"));
    // Only `a` exists yet: the client is pinned to it.
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open_with(&server, hub, "srv", 1).await;

    drop(a);
    let open = b.open_connection().await;
    assert_eq!(open.connection_id, id);
    assert_eq!(
        header(&open.headers, "Asrs-Migrate-From"),
        Some(&["srv".to_string()][..])
    );
    assert_eq!(open.ext.protocol.as_deref(), Some("json"));
    assert!(open
        .claims
        .iter()
        .any(|(t, v)| t == "asrs.s.uid" && v == "mover"));

    // The client stays connected; its bytes now go to `b`, and `b` reaches it.
    let up = Msg::invocation("up", &[json!(1)]);
    client.send_raw(&up.json).await;
    assert_eq!(b.connection_data(&id).await, up.json);
    let down = Msg::invocation("down", &[json!(2)]);
    b.send_to(&id, &down.json).await;
    client.expect(&down).await;
}

#[tokio::test]
async fn without_migration_a_lost_connection_closes_clients_even_with_a_sibling() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open_with(&server, hub, "srv", 0).await;
    let token = server.token(hub, None);
    let (mut client, _) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open_with(&server, hub, "srv", 0).await;
    drop(a);
    assert!(client.until_closed().await.is_some());
    b.assert_quiet().await;
}

#[tokio::test]
async fn graceful_shutdown_fin1_migrates_clients_to_another_server() {
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut old = AppServer::open_with(&server, hub, "old", 1).await;
    let mut clients = Vec::new();
    for format in [Format::Json, Format::MessagePack] {
        let token = server.token(hub, None);
        clients.push(connect_client(&server, &mut old, hub, &token, format).await);
    }
    let mut new = AppServer::open_with(&server, hub, "new", 1).await;

    old.send(Ping::new(&[("shutdown", "fin:1")])).await;
    let finack = old.ping("shutdown").await;
    assert_eq!(finack.values, ["shutdown", "finack"]);
    for (client, id) in clients.iter_mut() {
        let close = old.close_connection(id).await;
        assert_eq!(
            header(&close.headers, "Asrs-Migrate-To"),
            Some(&["new".to_string()][..])
        );
        // Clients move in no particular order.
        let open = new
            .take("OpenConnection", |m| match m {
                ServiceMessage::OpenConnection(o) if &o.connection_id == id => Some(o.clone()),
                _ => None,
            })
            .await;
        assert_eq!(
            header(&open.headers, "Asrs-Migrate-From"),
            Some(&["old".to_string()][..])
        );
        // Traffic now flows through `new`.
        let up = Msg::invocation("up", &[json!(id.clone())]);
        client.send_raw(&up.bytes(client.format)).await;
        assert_eq!(new.connection_data(id).await, up.bytes(client.format));
        let down = Msg::invocation("down", &[json!(id.clone())]);
        new.send_to(id, &down.bytes(client.format)).await;
        client.expect(&down).await;
    }
    // New clients skip the draining server.
    let token = server.token(hub, None);
    let (_late, late_id) = connect_client(&server, &mut new, hub, &token, Format::Json).await;
    assert!(!late_id.is_empty());
    old.assert_quiet().await;
}
