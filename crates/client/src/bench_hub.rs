//! [`BenchHub`]: the hub the benchmark and the tests run in the app server: the methods of
//! Azure's SignalR benchmark tool (clients receive `Measure(ts, payload)`), plus what tests
//! need to reach every service-protocol send. Method names match case-insensitively, as in
//! ASP.NET Core.

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::app_server::{Caller, ClientStream, HubContext, HubMethods, MethodResult};

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
            if !streams.is_empty() {
                return Err(format!("An unexpected error occurred invoking '{method}' on the server. HubException: Client sent {} stream(s), Hub method expects 0.", streams.len()));
            }
            invoke(&context, &caller, &method, arguments).await
        })
    }
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
    let me = caller.connection_id.as_str();
    match target.to_ascii_lowercase().as_str() {
        "echo" => {
            args.expect(2)?;
            sent(ctx.send_connection(me, MEASURE, &args.measure(0)))
        }
        "broadcast" => {
            args.expect(2)?;
            sent(ctx.send_all(&[], MEASURE, &args.measure(0)))
        }
        "broadcastexcept" => {
            args.expect(3)?;
            sent(ctx.send_all(&args.strings(0)?, MEASURE, &args.measure(1)))
        }
        "sendtoconnection" => {
            args.expect(3)?;
            sent(ctx.send_connection(&args.string(0)?, MEASURE, &args.measure(1)))
        }
        "sendtoconnections" => {
            args.expect(3)?;
            sent(ctx.send_connections(&args.strings(0)?, MEASURE, &args.measure(1)))
        }
        "sendtouser" => {
            args.expect(3)?;
            sent(ctx.send_user(&args.string(0)?, MEASURE, &args.measure(1)))
        }
        "sendtousers" => {
            args.expect(3)?;
            sent(ctx.send_users(&args.strings(0)?, MEASURE, &args.measure(1)))
        }
        "sendtogroup" => {
            args.expect(3)?;
            sent(ctx.send_group(&args.string(0)?, &[], MEASURE, &args.measure(1)))
        }
        "sendtogroupexcept" => {
            args.expect(4)?;
            sent(ctx.send_group(
                &args.string(0)?,
                &args.strings(1)?,
                MEASURE,
                &args.measure(2),
            ))
        }
        "sendtoothersingroup" => {
            args.expect(3)?;
            sent(ctx.send_group_with(
                &args.string(0)?,
                &[me.to_owned()],
                &[],
                caller.user_id.as_deref(),
                MEASURE,
                &args.measure(1),
            ))
        }
        "sendtogroups" => {
            args.expect(3)?;
            sent(ctx.send_groups(&args.strings(0)?, MEASURE, &args.measure(1)))
        }
        "joingroup" => {
            args.expect(1)?;
            acked(ctx.add_to_group(me, &args.string(0)?).await)
        }
        "leavegroup" => {
            args.expect(1)?;
            acked(ctx.remove_from_group(me, Some(&args.string(0)?)).await)
        }
        "addusertogroup" => {
            args.expect(2)?;
            acked(
                ctx.add_user_to_group(&args.string(0)?, &args.string(1)?)
                    .await,
            )
        }
        "removeuserfromgroup" => {
            args.expect(2)?;
            acked(
                ctx.remove_user_from_group(&args.string(0)?, Some(&args.string(1)?))
                    .await,
            )
        }
        "checkconnection" => {
            args.expect(1)?;
            checked(ctx.connection_exists(&args.string(0)?).await)
        }
        "checkuser" => {
            args.expect(1)?;
            checked(ctx.user_exists(&args.string(0)?).await)
        }
        "checkgroup" => {
            args.expect(1)?;
            checked(ctx.group_exists(&args.string(0)?).await)
        }
        "checkuseringroup" => {
            args.expect(2)?;
            checked(ctx.user_in_group(&args.string(0)?, &args.string(1)?).await)
        }
        "closeconnection" => {
            args.expect(2)?;
            sent(ctx.close_connection(&args.string(0)?, &args.string(1)?))
        }
        "closeuser" => {
            args.expect(2)?;
            acked(ctx.close_user(&args.string(0)?, &args.string(1)?).await)
        }
        "closegroup" => {
            args.expect(2)?;
            acked(ctx.close_group(&args.string(0)?, &args.string(1)?).await)
        }
        "askclient" => {
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
        "getconnectionid" => {
            args.expect(0)?;
            Ok(Some(Value::from(me)))
        }
        "getuserid" => {
            args.expect(0)?;
            Ok(Some(
                caller.user_id.clone().map_or(Value::Null, Value::from),
            ))
        }
        "getinstanceid" => {
            args.expect(0)?;
            Ok(Some(
                caller.instance_id.clone().map_or(Value::Null, Value::from),
            ))
        }
        "getserverid" => {
            args.expect(0)?;
            Ok(Some(Value::from(ctx.server_id())))
        }
        "count" => {
            args.expect(0)?;
            Ok(Some(Value::from(ctx.server_client_count())))
        }
        _ => Err(format!("Unknown hub method '{target}'")),
    }
}
