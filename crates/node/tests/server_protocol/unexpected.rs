//! Messages an app server should not (or not yet) send.

use super::*;

#[tokio::test]
async fn unknown_types_and_stray_acks_are_ignored() {
    let server = TestServer::start().await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "s1").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut app, hub, &token, Format::Json).await;

    // Type 99 with a well-formed array: [99, "x", {1: 2}, [1, 2]].
    let mut body = Vec::new();
    rmp::encode::write_array_len(&mut body, 4).unwrap();
    rmp::encode::write_sint(&mut body, 99).unwrap();
    rmp::encode::write_str(&mut body, "x").unwrap();
    rmp::encode::write_map_len(&mut body, 1).unwrap();
    rmp::encode::write_sint(&mut body, 1).unwrap();
    rmp::encode::write_sint(&mut body, 2).unwrap();
    rmp::encode::write_array_len(&mut body, 2).unwrap();
    rmp::encode::write_sint(&mut body, 1).unwrap();
    rmp::encode::write_sint(&mut body, 2).unwrap();
    let mut frame = vec![body.len() as u8];
    frame.extend_from_slice(&body);
    app.send_bytes(&frame).await;
    // Type 41 (RefreshAuth, layout unknown) too.
    app.send_bytes(&[0x02, 0x91, 41]).await;
    // An Ack from the app server for an id nobody waits for.
    app.send(Ack::new(
        12345,
        switchyard_service_protocol::AckStatus::Ok,
        "",
    ))
    .await;
    app.assert_quiet().await;

    // Still fully working.
    let msg = Msg::invocation("after", &[json!(1)]);
    app.send(MultiConnectionData {
        connection_list: vec![id.clone()],
        payloads: msg.payloads(),
        ext: ext(),
    })
    .await;
    client.expect(&msg).await;
    assert_eq!(server.node.server_connection_count(), 1);
}
