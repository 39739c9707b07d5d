//! The app-server SDK's streams, both ways, through the real service (`switchyard_node`
//! in-process): a hub of this file's own receives upload streams ([`ClientStream`]) and
//! returns item streams ([`ItemStream`]); the client is `switchyard_client::Connection`
//! writing the hub messages itself, in JSON and MessagePack, over WebSockets and long polling.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::{json, Value};
use switchyard_auth::{TokenBuilder, EMULATOR_ACCESS_KEY};
use switchyard_client::app_server::{
    AppServer, Caller, ClientStream, HubContext, HubMethods, MethodResult, StreamResult,
};
use switchyard_client::{connect, ConnectOptions, Connection, Transport};
use switchyard_hub_protocol::{CompletionResult, Format, HubMessage};
use switchyard_node::Config;
use switchyard_testkit::{now, TestServer};
use tokio::sync::mpsc;

const HUB: &str = "streams";
const STEP: Duration = Duration::from_secs(10);

/// What the hub tells the test about streams it saw end.
#[derive(Debug, PartialEq)]
enum Seen {
    /// A `Count` stream was dropped after producing this many items.
    CountDropped(u64),
    /// An upload ended with this error.
    UploadFailed(String),
}

/// `Sum(stream)` → `{count, sum, inOrder}`; `Count(n[, delayMs[, from]])` streams
/// `from..from + n`;
/// `Fail()` streams 1, 2 then an error;
/// `Echo(stream)` streams the upload back.
struct TestHub {
    seen: mpsc::UnboundedSender<Seen>,
}

impl HubMethods for TestHub {
    fn invoke(
        &self,
        _context: HubContext,
        _caller: Caller,
        method: String,
        _arguments: Vec<Value>,
        mut streams: Vec<ClientStream>,
    ) -> BoxFuture<'static, MethodResult> {
        let seen = self.seen.clone();
        Box::pin(async move {
            if method != "Sum" || streams.len() != 1 {
                return Err(format!("no {method} with {} stream(s)", streams.len()));
            }
            let mut upload = streams.pop().unwrap();
            let (mut count, mut sum, mut in_order) = (0i64, 0i64, true);
            while let Some(item) = upload.recv().await {
                match item {
                    Ok(value) => {
                        let n = value.as_i64().unwrap();
                        in_order &= n == count;
                        count += 1;
                        sum += n;
                    }
                    Err(error) => {
                        let _ = seen.send(Seen::UploadFailed(error.clone()));
                        return Err(error);
                    }
                }
            }
            Ok(Some(
                json!({"count": count, "sum": sum, "inOrder": in_order}),
            ))
        })
    }

    fn stream(
        &self,
        _context: HubContext,
        _caller: Caller,
        method: String,
        arguments: Vec<Value>,
        mut streams: Vec<ClientStream>,
    ) -> BoxFuture<'static, StreamResult> {
        let seen = self.seen.clone();
        Box::pin(async move {
            match method.as_str() {
                "Count" => {
                    let n = arguments[0].as_u64().unwrap();
                    let delay =
                        Duration::from_millis(arguments.get(1).map_or(0, |d| d.as_u64().unwrap()));
                    let from = arguments.get(2).map_or(0, |f| f.as_u64().unwrap());
                    struct Producer {
                        next: u64,
                        n: u64,
                        delay: Duration,
                        from: u64,
                        seen: mpsc::UnboundedSender<Seen>,
                    }
                    impl Drop for Producer {
                        fn drop(&mut self) {
                            if self.next < self.n {
                                let _ = self.seen.send(Seen::CountDropped(self.next));
                            }
                        }
                    }
                    let producer = Producer {
                        next: 0,
                        n,
                        delay,
                        from,
                        seen,
                    };
                    Ok(futures_util::stream::unfold(producer, |mut p| async move {
                        if p.next == p.n {
                            return None;
                        }
                        if !p.delay.is_zero() {
                            tokio::time::sleep(p.delay).await;
                        }
                        p.next += 1;
                        Some((Ok(json!(p.from + p.next - 1)), p))
                    })
                    .boxed())
                }
                "Fail" => Ok(futures_util::stream::iter([
                    Ok(json!(1)),
                    Ok(json!(2)),
                    Err("bad".to_owned()),
                ])
                .boxed()),
                "Echo" => Ok(streams.pop().unwrap().boxed()),
                _ => Err(format!("Unknown hub method '{method}'")),
            }
        })
    }
}

struct Service {
    server: TestServer,
    _app: AppServer,
    seen: mpsc::UnboundedReceiver<Seen>,
}

impl Service {
    async fn start() -> Service {
        let (tx, seen) = mpsc::unbounded_channel();
        let (server, app) =
            TestServer::with_app_server(Config::default(), &[HUB], Arc::new(TestHub { seen: tx }))
                .await;
        Service {
            server,
            _app: app,
            seen,
        }
    }

    async fn client(&self, transport: Transport, format: Format) -> Connection {
        let url = format!("http://{}/client/?hub={HUB}", self.server.addr);
        let mut options = ConnectOptions::new(transport, format);
        options.access_token = Some(TokenBuilder::new(&url).sign(EMULATOR_ACCESS_KEY, now()));
        within("connect", connect(&url, &options)).await.unwrap()
    }

    async fn next_seen(&mut self) -> Seen {
        within("the hub to see a stream end", self.seen.recv())
            .await
            .unwrap()
    }
}

async fn within<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(STEP, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn next(connection: &mut Connection) -> HubMessage<Value> {
    loop {
        match within("a message", connection.next()).await.unwrap() {
            HubMessage::Ping => continue,
            other => return other,
        }
    }
}

async fn send(connection: &mut Connection, message: HubMessage<Value>) {
    connection.send(&message).await.unwrap();
}

fn stream_invocation(id: &str, target: &str, arguments: Vec<Value>) -> HubMessage<Value> {
    HubMessage::StreamInvocation {
        headers: vec![],
        invocation_id: id.to_owned(),
        target: target.to_owned(),
        arguments,
        stream_ids: None,
    }
}

fn item(id: &str, item: Value) -> HubMessage<Value> {
    HubMessage::StreamItem {
        headers: vec![],
        invocation_id: id.to_owned(),
        item,
    }
}

fn completion(id: &str, result: CompletionResult<Value>) -> HubMessage<Value> {
    HubMessage::Completion {
        headers: vec![],
        invocation_id: id.to_owned(),
        result,
    }
}

/// Items of stream `id` until its Completion.
async fn read_stream(
    connection: &mut Connection,
    id: &str,
) -> (Vec<Value>, CompletionResult<Value>) {
    let mut items = Vec::new();
    loop {
        match next(connection).await {
            HubMessage::StreamItem {
                invocation_id,
                item,
                ..
            } if invocation_id == id => items.push(item),
            HubMessage::Completion {
                invocation_id,
                result,
                ..
            } if invocation_id == id => return (items, result),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Server to client: items in order then a void Completion; an error ends a stream with an
/// error Completion; a cancel drops the method's stream and is still completed.
async fn server_streams(transport: Transport, format: Format) {
    let mut service = Service::start().await;
    let mut client = service.client(transport, format).await;

    send(
        &mut client,
        stream_invocation("1", "Count", vec![json!(1000)]),
    )
    .await;
    let (items, end) = read_stream(&mut client, "1").await;
    assert_eq!(items, (0..1000).map(|i| json!(i)).collect::<Vec<_>>());
    assert_eq!(end, CompletionResult::Void);

    send(&mut client, stream_invocation("2", "Fail", vec![])).await;
    let (items, end) = read_stream(&mut client, "2").await;
    assert_eq!(items, [json!(1), json!(2)]);
    assert_eq!(end, CompletionResult::Error("bad".into()));

    send(&mut client, stream_invocation("3", "Nope", vec![])).await;
    let (items, end) = read_stream(&mut client, "3").await;
    assert!(items.is_empty());
    assert_eq!(
        end,
        CompletionResult::Error("Unknown hub method 'Nope'".into())
    );

    // Cancel mid-stream: the producer is dropped, and a Completion still ends the stream.
    send(
        &mut client,
        stream_invocation("4", "Count", vec![json!(100_000), json!(2)]),
    )
    .await;
    for i in 0..5 {
        assert_eq!(
            next(&mut client).await,
            item("4", json!(i)),
            "item {i} of the stream to cancel"
        );
    }
    // While it runs, the same id is refused.
    send(&mut client, stream_invocation("4", "Count", vec![json!(1)])).await;
    loop {
        match next(&mut client).await {
            HubMessage::StreamItem { invocation_id, .. } if invocation_id == "4" => {}
            other => {
                assert_eq!(
                    other,
                    completion(
                        "4",
                        CompletionResult::Error("Invocation ID '4' is already in use.".into())
                    )
                );
                break;
            }
        }
    }
    send(
        &mut client,
        HubMessage::CancelInvocation {
            headers: vec![],
            invocation_id: "4".into(),
        },
    )
    .await;
    // The id is free again at once: a new stream may take it while the cancelled one ends.
    const NEW: u64 = 1_000_000;
    send(
        &mut client,
        stream_invocation("4", "Count", vec![json!(100), json!(1), json!(NEW)]),
    )
    .await;
    let Seen::CountDropped(produced) = service.next_seen().await else {
        panic!("expected the Count stream to be dropped")
    };
    assert!((5..100_000).contains(&produced), "produced {produced}");
    // Both end with a Completion; items the old one sent before the cancel may still come;
    // the new one's come whole and in order.
    let (mut new_items, mut ends) = (Vec::new(), Vec::new());
    while ends.len() < 2 {
        match next(&mut client).await {
            HubMessage::StreamItem {
                invocation_id,
                item,
                ..
            } if invocation_id == "4" => {
                if item.as_u64().unwrap() >= NEW {
                    new_items.push(item);
                }
            }
            HubMessage::Completion {
                invocation_id,
                result,
                ..
            } if invocation_id == "4" => ends.push(result),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(ends, [CompletionResult::Void, CompletionResult::Void]);
    assert_eq!(
        new_items,
        (NEW..NEW + 100).map(|i| json!(i)).collect::<Vec<_>>()
    );
    within("close", client.close()).await;
}

/// Client to server: an upload's items reach the method in order and its Completion ends
/// them; an error Completion reaches the method as an error; a client that leaves mid-upload
/// fails it; an upload can be echoed back as a stream while it is being sent.
async fn client_streams(transport: Transport, format: Format) {
    let mut service = Service::start().await;
    let mut client = service.client(transport, format).await;
    const N: i64 = 2000;

    send(
        &mut client,
        HubMessage::Invocation {
            headers: vec![],
            invocation_id: Some("1".into()),
            target: "Sum".into(),
            arguments: vec![],
            stream_ids: Some(vec!["s1".into()]),
        },
    )
    .await;
    // An item for a stream nobody announced is ignored.
    send(&mut client, item("nobody", json!(1_000_000))).await;
    for i in 0..N {
        send(&mut client, item("s1", json!(i))).await;
    }
    send(&mut client, completion("s1", CompletionResult::Void)).await;
    assert_eq!(
        next(&mut client).await,
        completion(
            "1",
            CompletionResult::Value(json!({"count": N, "sum": N * (N - 1) / 2, "inOrder": true}))
        )
    );

    send(
        &mut client,
        HubMessage::Invocation {
            headers: vec![],
            invocation_id: Some("2".into()),
            target: "Sum".into(),
            arguments: vec![],
            stream_ids: Some(vec!["s2".into()]),
        },
    )
    .await;
    send(&mut client, item("s2", json!(1))).await;
    send(
        &mut client,
        completion("s2", CompletionResult::Error("client gave up".into())),
    )
    .await;
    assert_eq!(
        service.next_seen().await,
        Seen::UploadFailed("client gave up".into())
    );
    assert_eq!(
        next(&mut client).await,
        completion("2", CompletionResult::Error("client gave up".into()))
    );

    // Both ways at once: each item comes back before the next is sent.
    send(
        &mut client,
        HubMessage::StreamInvocation {
            headers: vec![],
            invocation_id: "3".into(),
            target: "Echo".into(),
            arguments: vec![],
            stream_ids: Some(vec!["s3".into()]),
        },
    )
    .await;
    for i in 0..50 {
        send(&mut client, item("s3", json!(format!("x{i}")))).await;
        assert_eq!(next(&mut client).await, item("3", json!(format!("x{i}"))));
    }
    send(&mut client, completion("s3", CompletionResult::Void)).await;
    assert_eq!(
        next(&mut client).await,
        completion("3", CompletionResult::Void)
    );

    // The client leaves mid-upload: the method's stream ends with an error.
    send(
        &mut client,
        HubMessage::Invocation {
            headers: vec![],
            invocation_id: None,
            target: "Sum".into(),
            arguments: vec![],
            stream_ids: Some(vec!["s4".into()]),
        },
    )
    .await;
    send(&mut client, item("s4", json!(0))).await;
    within("close", client.close()).await;
    assert!(matches!(service.next_seen().await, Seen::UploadFailed(_)));
}

#[tokio::test]
async fn server_to_client_websockets_json() {
    server_streams(Transport::WebSockets, Format::Json).await;
}

#[tokio::test]
async fn server_to_client_websockets_messagepack() {
    server_streams(Transport::WebSockets, Format::MessagePack).await;
}

#[tokio::test]
async fn server_to_client_long_polling_messagepack() {
    server_streams(Transport::LongPolling, Format::MessagePack).await;
}

#[tokio::test]
async fn client_to_server_websockets_json() {
    client_streams(Transport::WebSockets, Format::Json).await;
}

#[tokio::test]
async fn client_to_server_websockets_messagepack() {
    client_streams(Transport::WebSockets, Format::MessagePack).await;
}

#[tokio::test]
async fn client_to_server_long_polling_json() {
    client_streams(Transport::LongPolling, Format::Json).await;
}
