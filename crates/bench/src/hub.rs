//! [`BenchHub`]: the hub the benchmark's app server runs (and the tests that need an app
//! server running real hub methods): the methods of Azure's SignalR benchmark tool (clients
//! receive `Measure(ts, payload)`), plus what tests need to reach every service-protocol send.
//! Method names match case-insensitively, as in ASP.NET Core.

use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::StreamExt;
use serde_json::{json, Value};

use switchyard_client::app_server::{
    Caller, ClientStream, HubContext, HubMethods, ItemStream, MethodResult, StreamResult,
};

/// The benchmark's hub methods, for every hub the app server serves.
#[derive(Debug, Clone, Copy, Default)]
pub struct BenchHub;

impl HubMethods for BenchHub {
    fn invoke(
        &self,
        context: HubContext,
        caller: Caller,
        method: String,
        arguments: Vec<Value>,
        streams: Vec<ClientStream>,
    ) -> BoxFuture<'static, MethodResult> {
        Box::pin(async move {
            let lower = method.to_ascii_lowercase();
            if STREAMING.contains(&lower.as_str()) {
                return Err(format!("The client attempted to invoke the streaming '{method}' method with a non-streaming invocation."));
            }
            if lower == "upload" {
                let [upload] = expect_streams::<1>(&method, streams)?;
                return upload_summary(&context, &caller, &method, arguments, upload).await;
            }
            expect_streams::<0>(&method, streams)?;
            invoke(&context, &caller, &method, arguments).await
        })
    }

    fn stream(
        &self,
        context: HubContext,
        caller: Caller,
        method: String,
        arguments: Vec<Value>,
        streams: Vec<ClientStream>,
    ) -> BoxFuture<'static, StreamResult> {
        Box::pin(async move {
            let args = Args {
                method: &method,
                values: arguments,
            };
            match method.to_ascii_lowercase().as_str() {
                "counter" => {
                    expect_streams::<0>(&method, streams)?;
                    args.expect(2)?;
                    Ok(counter(context, caller, args.uint(0)?, args.uint(1)?))
                }
                "echostream" => {
                    let [upload] = expect_streams::<1>(&method, streams)?;
                    args.expect(0)?;
                    Ok(upload.boxed())
                }
                _ if NON_STREAMING.contains(&method.to_ascii_lowercase().as_str()) => Err(format!(
                    "The client attempted to invoke the non-streaming '{method}' method with a streaming invocation."
                )),
                _ => Err(format!("Unknown hub method '{method}'")),
            }
        })
    }
}

/// Streaming methods (lower case): `Counter(count, delayMs)` streams `0..count`, one item
/// every `delayMs`, and tells the caller `StreamCancelled(produced)` if it is cancelled;
/// `EchoStream(stream)` streams back each item of the client's upload as it arrives.
const STREAMING: [&str; 2] = ["counter", "echostream"];

/// The other methods (lower case), for ASP.NET's error when one is invoked as a stream.
const NON_STREAMING: [&str; 29] = [
    "echo",
    "broadcast",
    "broadcastexcept",
    "sendtoconnection",
    "sendtoconnections",
    "sendtouser",
    "sendtousers",
    "sendtogroup",
    "sendtogroupexcept",
    "sendtoothersingroup",
    "sendtogroups",
    "joingroup",
    "leavegroup",
    "addusertogroup",
    "removeuserfromgroup",
    "checkconnection",
    "checkuser",
    "checkgroup",
    "checkuseringroup",
    "closeconnection",
    "closeuser",
    "closegroup",
    "askclient",
    "getconnectionid",
    "getuserid",
    "getinstanceid",
    "getserverid",
    "count",
    "upload",
];

/// What a cancelled `Counter` tells its caller: how many items it produced.
pub const STREAM_CANCELLED: &str = "StreamCancelled";
/// What `Upload` tells its caller once the upload is complete: its summary.
pub const UPLOADED: &str = "Uploaded";

/// ASP.NET Core's binding check of the number of upload streams.
fn expect_streams<const N: usize>(
    method: &str,
    streams: Vec<ClientStream>,
) -> Result<[ClientStream; N], String> {
    let sent = streams.len();
    streams.try_into().map_err(|_| {
        format!("An unexpected error occurred invoking '{method}' on the server. HubException: Client sent {sent} stream(s), Hub method expects {N}.")
    })
}

/// `Counter`'s items; dropping it before the end (a cancel) tells the caller.
fn counter(context: HubContext, caller: Caller, count: u64, delay_ms: u64) -> ItemStream {
    struct State {
        next: u64,
        count: u64,
        delay: Duration,
        context: HubContext,
        caller: String,
    }
    impl Drop for State {
        fn drop(&mut self) {
            if self.next < self.count {
                let _ = self.context.send_connection(
                    &self.caller,
                    STREAM_CANCELLED,
                    &[Value::from(self.next)],
                );
            }
        }
    }
    let state = State {
        next: 0,
        count,
        delay: Duration::from_millis(delay_ms),
        context,
        caller: caller.connection_id,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        if state.next >= state.count {
            return None;
        }
        if state.next > 0 && !state.delay.is_zero() {
            tokio::time::sleep(state.delay).await;
        }
        let item = Value::from(state.next);
        state.next += 1;
        Some((Ok(item), state))
    })
    .boxed()
}

/// `Upload(stream)` (also `Upload(tag, stream)`): reads integers until the client completes
/// the stream, then answers the caller `Uploaded({tag, count, sum, inOrder, first, last})`
/// (`inOrder`: each item is the one before plus 1) and returns the same summary; a stream
/// the client completes with an error answers `{tag, error}`.
async fn upload_summary(
    ctx: &HubContext,
    caller: &Caller,
    method: &str,
    arguments: Vec<Value>,
    mut upload: ClientStream,
) -> Outcome {
    let tag = arguments.into_iter().next().unwrap_or(Value::Null);
    let (mut count, mut sum, mut in_order) = (0u64, 0i64, true);
    let (mut first, mut last): (Option<i64>, Option<i64>) = (None, None);
    let mut error = None;
    while let Some(item) = upload.recv().await {
        match item {
            Ok(value) => {
                let Some(n) = value.as_i64() else {
                    error = Some(format!("{method} expects integers, got {value}"));
                    break;
                };
                in_order &= last.is_none_or(|l| l + 1 == n);
                first.get_or_insert(n);
                last = Some(n);
                count += 1;
                sum += n;
            }
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let summary = match error {
        Some(error) => json!({"tag": tag, "error": error}),
        None => json!({
            "tag": tag, "count": count, "sum": sum, "inOrder": in_order, "first": first, "last": last,
        }),
    };
    sent(ctx.send_connection(
        &caller.connection_id,
        UPLOADED,
        std::slice::from_ref(&summary),
    ))?;
    Ok(Some(summary))
}

/// What clients receive.
pub const MEASURE: &str = "Measure";

type Outcome = MethodResult;

/// Argument access with ASP.NET-like binding errors.
struct Args<'a> {
    method: &'a str,
    values: Vec<Value>,
}

impl Args<'_> {
    fn expect(&self, n: usize) -> Result<(), String> {
        if self.values.len() == n {
            Ok(())
        } else {
            Err(format!(
                "Failed to invoke '{}' due to an error on the server. InvalidDataException: Invocation provides {} argument(s) but target expects {n}.",
                self.method,
                self.values.len()
            ))
        }
    }

    fn bind_error(&self, i: usize, expected: &str) -> String {
        format!(
            "Failed to invoke '{}' due to an error on the server. InvalidDataException: Error binding arguments. Argument {i} must be {expected}.",
            self.method
        )
    }

    fn string(&self, i: usize) -> Result<String, String> {
        match &self.values[i] {
            Value::String(s) => Ok(s.clone()),
            _ => Err(self.bind_error(i, "a string")),
        }
    }

    fn uint(&self, i: usize) -> Result<u64, String> {
        self.values[i]
            .as_u64()
            .ok_or_else(|| self.bind_error(i, "a non-negative integer"))
    }

    fn strings(&self, i: usize) -> Result<Vec<String>, String> {
        match &self.values[i] {
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| self.bind_error(i, "an array of strings")),
            Value::Null => Ok(Vec::new()),
            _ => Err(self.bind_error(i, "an array of strings")),
        }
    }

    /// `(ts, payload)` starting at `i`: passed through as received.
    fn measure(&self, i: usize) -> [Value; 2] {
        [self.values[i].clone(), self.values[i + 1].clone()]
    }
}

fn sent<E: std::fmt::Display>(result: Result<(), E>) -> Outcome {
    result.map(|()| None).map_err(|e| e.to_string())
}

fn acked<E: std::fmt::Display>(result: Result<bool, E>) -> Outcome {
    result.map(|_| None).map_err(|e| e.to_string())
}

fn checked<E: std::fmt::Display>(result: Result<bool, E>) -> Outcome {
    result
        .map(|b| Some(Value::Bool(b)))
        .map_err(|e| e.to_string())
}

/// Runs hub method `target` for `caller`.
async fn invoke(ctx: &HubContext, caller: &Caller, target: &str, arguments: Vec<Value>) -> Outcome {
    let args = Args {
        method: target,
        values: arguments,
    };
    let name = target.to_ascii_lowercase();
    if let Some(outcome) = send(ctx, caller, &name, &args) {
        return outcome;
    }
    if let Some(outcome) = manage(ctx, caller, &name, &args).await {
        return outcome;
    }
    if let Some(outcome) = ask(ctx, caller, &name, &args).await {
        return outcome;
    }
    Err(format!("Unknown hub method '{target}'"))
}

/// The methods that send `Measure` to someone; `None` for other names.
fn send(ctx: &HubContext, caller: &Caller, name: &str, args: &Args<'_>) -> Option<Outcome> {
    let me = caller.connection_id.as_str();
    Some(match name {
        "echo" => attempt(|| {
            args.expect(2)?;
            sent(ctx.send_connection(me, MEASURE, &args.measure(0)))
        }),
        "broadcast" => attempt(|| {
            args.expect(2)?;
            sent(ctx.send_all(&[], MEASURE, &args.measure(0)))
        }),
        "broadcastexcept" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_all(&args.strings(0)?, MEASURE, &args.measure(1)))
        }),
        "sendtoconnection" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_connection(&args.string(0)?, MEASURE, &args.measure(1)))
        }),
        "sendtoconnections" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_connections(&args.strings(0)?, MEASURE, &args.measure(1)))
        }),
        "sendtouser" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_user(&args.string(0)?, MEASURE, &args.measure(1)))
        }),
        "sendtousers" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_users(&args.strings(0)?, MEASURE, &args.measure(1)))
        }),
        "sendtogroup" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_group(&args.string(0)?, &[], MEASURE, &args.measure(1)))
        }),
        "sendtogroupexcept" => attempt(|| {
            args.expect(4)?;
            sent(ctx.send_group(
                &args.string(0)?,
                &args.strings(1)?,
                MEASURE,
                &args.measure(2),
            ))
        }),
        "sendtoothersingroup" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_group_with(
                &args.string(0)?,
                &[me.to_owned()],
                &[],
                caller.user_id.as_deref(),
                MEASURE,
                &args.measure(1),
            ))
        }),
        "sendtogroups" => attempt(|| {
            args.expect(3)?;
            sent(ctx.send_groups(&args.strings(0)?, MEASURE, &args.measure(1)))
        }),
        _ => return None,
    })
}

/// Group membership and closes, each acknowledged by the service; `None` for other names.
async fn manage(ctx: &HubContext, caller: &Caller, name: &str, args: &Args<'_>) -> Option<Outcome> {
    let me = caller.connection_id.as_str();
    Some(match name {
        "joingroup" => {
            async {
                args.expect(1)?;
                acked(ctx.add_to_group(me, &args.string(0)?).await)
            }
            .await
        }
        "leavegroup" => {
            async {
                args.expect(1)?;
                acked(ctx.remove_from_group(me, Some(&args.string(0)?)).await)
            }
            .await
        }
        "addusertogroup" => {
            async {
                args.expect(2)?;
                acked(
                    ctx.add_user_to_group(&args.string(0)?, &args.string(1)?)
                        .await,
                )
            }
            .await
        }
        "removeuserfromgroup" => {
            async {
                args.expect(2)?;
                acked(
                    ctx.remove_user_from_group(&args.string(0)?, Some(&args.string(1)?))
                        .await,
                )
            }
            .await
        }
        "closeconnection" => {
            async {
                args.expect(2)?;
                sent(ctx.close_connection(&args.string(0)?, &args.string(1)?))
            }
            .await
        }
        "closeuser" => {
            async {
                args.expect(2)?;
                acked(ctx.close_user(&args.string(0)?, &args.string(1)?).await)
            }
            .await
        }
        "closegroup" => {
            async {
                args.expect(2)?;
                acked(ctx.close_group(&args.string(0)?, &args.string(1)?).await)
            }
            .await
        }
        _ => return None,
    })
}

/// The methods that answer a question (existence checks, ids, counts, a client's own
/// answer); `None` for other names.
async fn ask(ctx: &HubContext, caller: &Caller, name: &str, args: &Args<'_>) -> Option<Outcome> {
    let me = caller.connection_id.as_str();
    Some(match name {
        "checkconnection" => {
            async {
                args.expect(1)?;
                checked(ctx.connection_exists(&args.string(0)?).await)
            }
            .await
        }
        "checkuser" => {
            async {
                args.expect(1)?;
                checked(ctx.user_exists(&args.string(0)?).await)
            }
            .await
        }
        "checkgroup" => {
            async {
                args.expect(1)?;
                checked(ctx.group_exists(&args.string(0)?).await)
            }
            .await
        }
        "checkuseringroup" => {
            async {
                args.expect(2)?;
                checked(ctx.user_in_group(&args.string(0)?, &args.string(1)?).await)
            }
            .await
        }
        "askclient" => {
            async {
                args.expect(3)?;
                let value = ctx
                    .invoke_client(
                        &args.string(0)?,
                        &args.string(1)?,
                        &[args.values[2].clone()],
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Some(value))
            }
            .await
        }
        "getconnectionid" => {
            async {
                args.expect(0)?;
                Ok(Some(Value::from(me)))
            }
            .await
        }
        "getuserid" => {
            async {
                args.expect(0)?;
                Ok(Some(
                    caller.user_id.clone().map_or(Value::Null, Value::from),
                ))
            }
            .await
        }
        "getinstanceid" => {
            async {
                args.expect(0)?;
                Ok(Some(
                    caller.instance_id.clone().map_or(Value::Null, Value::from),
                ))
            }
            .await
        }
        "getserverid" => {
            async {
                args.expect(0)?;
                Ok(Some(Value::from(ctx.server_id())))
            }
            .await
        }
        "count" => {
            async {
                args.expect(0)?;
                Ok(Some(Value::from(ctx.server_client_count())))
            }
            .await
        }
        _ => return None,
    })
}

/// Runs `f`, where `?` ends only `f` (a method's binding errors are its outcome).
fn attempt(f: impl FnOnce() -> Outcome) -> Outcome {
    f()
}
