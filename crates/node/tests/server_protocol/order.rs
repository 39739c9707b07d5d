//! Order.

use super::*;

pub(crate) fn numbered(i: usize) -> Msg {
    Msg::invocation("n", &[json!(i)])
}

pub(crate) fn to_connection(id: &str, msg: &Msg) -> ServiceMessage {
    MultiConnectionData {
        connection_list: vec![id.to_string()],
        payloads: msg.payloads(),
        ext: ext(),
    }
    .into()
}

/// One client pinned to connection `a`; an app server with connections `a` and `b` (same
/// server id) sends it 2,000 messages alternating between them. Before switching connection
/// the app server waits for an `echo` round trip on the connection it just used: the service
/// acts on a connection's messages in arrival order and answers the echo after them, so the
/// message has been taken in. The service must not reorder what it has taken in, whichever
/// connection brought it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn order_is_kept_across_two_connections_of_one_server() {
    const COUNT: usize = 2_000;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "srv").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open(&server, hub, "srv").await;

    let sender = tokio::spawn({
        let id = id.clone();
        async move {
            for i in 0..COUNT {
                let app = if i % 2 == 0 { &mut a } else { &mut b };
                app.send(to_connection(&id, &numbered(i))).await;
                app.echo_round_trip().await;
            }
            (a, b)
        }
    });
    for i in 0..COUNT {
        client.expect(&numbered(i)).await;
    }
    let _ = within("sender", WAIT, sender).await.unwrap();
}

/// The brief's stricter form: alternate connections after each socket write completes,
/// without waiting for the service to take the message in. A completed write only means
/// the bytes reached the local socket buffer; the service reads two independent TCP
/// streams, so nothing orders a message on `a` before the next one on `b` (the sender
/// outruns the service and each connection's backlog is read as one batch). Azure gives
/// no such guarantee either: the SDK keeps a client's messages on one server connection
/// (ClientConnectionScope) when order matters. Fails nearly every run, at the first
/// messages (seen: `[1, 3, 5, …, 105, 0, 2, 4, …]`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "impossible across two TCP connections without waiting for the service; see the doc comment"]
async fn order_across_two_connections_with_write_completion_only() {
    const COUNT: usize = 2_000;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut a = AppServer::open(&server, hub, "srv").await;
    let token = server.token(hub, None);
    let (mut client, id) = connect_client(&server, &mut a, hub, &token, Format::Json).await;
    let mut b = AppServer::open(&server, hub, "srv").await;

    let sender = tokio::spawn({
        let id = id.clone();
        async move {
            for i in 0..COUNT {
                let app = if i % 2 == 0 { &mut a } else { &mut b };
                app.send(to_connection(&id, &numbered(i))).await;
            }
            (a, b)
        }
    });
    for i in 0..COUNT {
        client.expect(&numbered(i)).await;
    }
    let _ = within("sender", WAIT, sender).await.unwrap();
}

#[tokio::test]
async fn order_is_kept_for_10000_messages_over_one_connection() {
    const COUNT: usize = 10_000;
    let server = TestServer::start_with(default_mode()).await;
    let hub = "chat";
    let mut app = AppServer::open(&server, hub, "srv").await;
    let token = server.token(hub, None);
    let (mut client, id) =
        connect_client(&server, &mut app, hub, &token, Format::MessagePack).await;

    let sender = tokio::spawn({
        let id = id.clone();
        async move {
            // Batched into frames of 1,000 bytes, cutting messages at arbitrary points.
            let mut stream = Vec::new();
            for i in 0..COUNT {
                stream.extend_from_slice(&encoded(&to_connection(&id, &numbered(i))));
            }
            for chunk in stream.chunks(1_000) {
                app.send_bytes(chunk).await;
            }
            app
        }
    });
    for i in 0..COUNT {
        client.expect(&numbered(i)).await;
    }
    let mut app = within("sender", WAIT, sender).await.unwrap();
    app.echo_round_trip().await;
}
