//! The load-generator workers as the coordinator sees them: one in this process, or
//! `--workers N` child processes speaking JSON lines (stdin: the plan, then commands; stdout:
//! events), and the child's side of that conversation ([`serve_worker`]).

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::RunError;
use crate::scenario::Plan;
use crate::worker::{self, Command, Event};

/// A worker as the coordinator sees it.
pub(super) enum WorkerHandle {
    Local(mpsc::UnboundedSender<Command>),
    Child {
        commands: mpsc::UnboundedSender<Command>,
        _child: tokio::process::Child,
    },
}

impl WorkerHandle {
    /// The process doing the work (this one for a worker in-process).
    pub(super) fn pid(&self) -> Option<u32> {
        match self {
            WorkerHandle::Local(_) => Some(std::process::id()),
            WorkerHandle::Child { _child, .. } => _child.id(),
        }
    }

    pub(super) fn send(&self, command: Command) {
        let (WorkerHandle::Local(tx) | WorkerHandle::Child { commands: tx, .. }) = self;
        let _ = tx.send(command);
    }
}

pub(super) async fn start_workers(
    plan: &Plan,
    events: mpsc::UnboundedSender<(usize, Event)>,
) -> Result<Vec<WorkerHandle>, RunError> {
    let mut handles = Vec::new();
    if plan.workers <= 1 {
        let (tx, rx) = mpsc::unbounded_channel();
        let (worker_tx, mut worker_rx) = mpsc::unbounded_channel();
        tokio::spawn(worker::run(plan.clone(), worker_tx, rx));
        tokio::spawn(async move {
            while let Some(event) = worker_rx.recv().await {
                if events.send((0, event)).is_err() {
                    return;
                }
            }
        });
        handles.push(WorkerHandle::Local(tx));
        return Ok(handles);
    }
    let exe = std::env::current_exe().map_err(|e| RunError(format!("own executable: {e}")))?;
    for index in 0..plan.workers {
        let mut worker_plan = plan.clone();
        worker_plan.worker = index;
        let mut child = tokio::process::Command::new(&exe)
            .arg("worker")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| RunError(format!("start worker {index}: {e}")))?;
        let mut stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let (tx, mut rx) = mpsc::unbounded_channel::<Command>();
        let first = serde_json::to_string(&worker_plan).expect("plan serialises");
        tokio::spawn(async move {
            if stdin
                .write_all(format!("{first}\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            while let Some(command) = rx.recv().await {
                let line = serde_json::to_string(&command).expect("command serialises");
                if stdin
                    .write_all(format!("{line}\n").as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
            }
        });
        let events = events.clone();
        let i = index as usize;
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) => match serde_json::from_str::<Event>(&line) {
                        Ok(event) => {
                            let last = matches!(event, Event::Final { .. } | Event::Failed { .. });
                            let _ = events.send((i, event));
                            // After its final report a worker exits: that end is not a failure.
                            if last {
                                return;
                            }
                        }
                        Err(e) => {
                            let _ = events.send((
                                i,
                                Event::Failed {
                                    error: format!("unreadable report line ({e}): {line:.200}"),
                                },
                            ));
                        }
                    },
                    other => {
                        let why = match other {
                            Err(e) => format!("its output could not be read: {e}"),
                            _ => "it exited".to_owned(),
                        };
                        let _ = events.send((
                            i,
                            Event::Failed {
                                error: format!("{why} before its final report"),
                            },
                        ));
                        return;
                    }
                }
            }
        });
        handles.push(WorkerHandle::Child {
            commands: tx,
            _child: child,
        });
    }
    Ok(handles)
}

/// `switchyard-bench worker`: reads the plan from stdin, runs it, writes events to stdout.
pub async fn serve_worker() -> Result<(), RunError> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let first = lines
        .next_line()
        .await
        .map_err(|e| RunError(format!("stdin: {e}")))?
        .ok_or_else(|| RunError("no plan on stdin".into()))?;
    let plan: Plan = serde_json::from_str(&first).map_err(|e| RunError(format!("plan: {e}")))?;
    let (commands_tx, commands_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(command) = serde_json::from_str::<Command>(&line) {
                if commands_tx.send(command).is_err() {
                    return;
                }
            }
        }
        // stdin closed: the coordinator is gone; dropping the sender ends the worker.
    });
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let worker = tokio::spawn(worker::run(plan, events_tx, commands_rx));
    let mut stdout = tokio::io::stdout();
    while let Some(event) = events_rx.recv().await {
        let is_final = matches!(event, Event::Final { .. } | Event::Failed { .. });
        let line = serde_json::to_string(&event).expect("event serialises");
        stdout
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| RunError(format!("stdout: {e}")))?;
        stdout.flush().await.ok();
        if is_final {
            break;
        }
    }
    let _ = worker.await;
    Ok(())
}
