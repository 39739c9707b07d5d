//! Outbound queues: byte budgets, draining, a close after queued frames, slow consumers, waking the writer.

use super::*;

#[test]
fn outbound_budget_cuts_off_a_slow_consumer() {
    let q = Outbound::new(10);
    assert!(q.push(Bytes::from_static(b"12345")));
    assert!(q.push(Bytes::from_static(b"67890")));
    assert_eq!(q.pending_bytes(), 10, "exactly the budget is allowed");
    assert!(!q.push(Bytes::from_static(b"x")));
    assert_eq!(q.dropped_frames(), 3);
    assert_eq!(
        q.close_reason(),
        Some(CloseReason::SlowConsumer {
            pending_bytes: 11,
            budget: 10
        })
    );
    assert_eq!(q.pending_bytes(), 0);
    let mut out = Vec::new();
    assert_eq!(
        q.try_drain(&mut out),
        Some(Batch::Close(CloseReason::SlowConsumer {
            pending_bytes: 11,
            budget: 10
        }))
    );
    assert!(out.is_empty(), "the backlog was dropped");
    assert!(!q.push(Bytes::from_static(b"y")));
    assert_eq!(q.dropped_frames(), 4);
}

#[test]
fn outbound_draining_frees_the_budget() {
    let q = Outbound::new(10);
    let mut out = Vec::new();
    for round in 0..5 {
        assert!(q.push(Bytes::from(vec![round; 8])));
        assert_eq!(q.pending_bytes(), 8);
        assert_eq!(q.try_drain(&mut out), Some(Batch::Frames));
        assert_eq!(q.pending_bytes(), 0);
    }
    assert_eq!(out.len(), 5);
    assert_eq!(q.try_drain(&mut out), None);
    assert_eq!(q.dropped_frames(), 0);
    assert!(!q.is_closing());
}

#[test]
fn outbound_close_comes_after_queued_frames() {
    let q = Outbound::new(100);
    q.push(Bytes::from_static(b"a"));
    q.push(Bytes::from_static(b"b"));
    q.close(CloseReason::ClientTimeout);
    q.close(CloseReason::ServiceShutdown);
    assert_eq!(q.close_reason(), Some(CloseReason::ClientTimeout));
    assert!(!q.push(Bytes::from_static(b"c")));
    assert_eq!(q.dropped_frames(), 1);
    let mut out = Vec::new();
    assert_eq!(q.try_drain(&mut out), Some(Batch::Frames));
    assert_eq!(
        out,
        vec![Bytes::from_static(b"a"), Bytes::from_static(b"b")]
    );
    out.clear();
    for _ in 0..2 {
        assert_eq!(
            q.try_drain(&mut out),
            Some(Batch::Close(CloseReason::ClientTimeout))
        );
    }
    assert!(out.is_empty());
}

#[test]
fn outbound_oversize_frame_on_empty_queue_is_allowed() {
    let q = Outbound::new(10);
    let big = Bytes::from(vec![7u8; 50]);
    assert!(q.push(big.clone()));
    assert_eq!(q.pending_bytes(), 50);
    let mut out = Vec::new();
    assert_eq!(q.try_drain(&mut out), Some(Batch::Frames));
    assert_eq!(out[0].as_ptr(), big.as_ptr());
    // Again after draining.
    assert!(q.push(big.clone()));
    // But nothing may queue behind it.
    assert!(!q.push(Bytes::from_static(b"1")));
    assert_eq!(q.dropped_frames(), 2);
    assert!(matches!(
        q.close_reason(),
        Some(CloseReason::SlowConsumer { budget: 10, .. })
    ));
}

#[test]
fn slow_consumer_does_not_affect_other_recipients() {
    let s = setup();
    let slow = connect_with(&s.hub, "slow", None, Protocol::Json, 16);
    let fast = connect(&s.hub, "fast", None);
    let all = Target::All { excluded: vec![] };
    let frame = json("0123456789");
    assert_eq!(s.hub.send(&all, &frame), 2);
    assert_eq!(s.hub.send(&all, &frame), 1);
    assert_eq!(s.hub.send(&all, &frame), 1);
    assert_eq!(slow.outbound().dropped_frames(), 3);
    let mut out = Vec::new();
    assert_eq!(
        slow.outbound().try_drain(&mut out),
        Some(Batch::Close(CloseReason::SlowConsumer {
            pending_bytes: 20,
            budget: 16
        }))
    );
    assert!(out.is_empty());
    assert_eq!(drain(&fast).len(), 3);
}

#[tokio::test]
async fn next_batch_wakes_on_push_and_on_close() {
    let connection = Arc::new(Connection::new(cid("w"), None, BUDGET));
    let writer = {
        let connection = connection.clone();
        tokio::spawn(async move {
            let mut batches = Vec::new();
            loop {
                let mut out = Vec::new();
                match connection.outbound().next_batch(&mut out).await {
                    Batch::Frames => batches.push(out),
                    Batch::Close(reason) => return (batches, reason),
                    Batch::Interrupted => panic!("nothing interrupts here"),
                }
            }
        })
    };
    tokio::task::yield_now().await;
    connection.outbound().push(Bytes::from_static(b"1"));
    tokio::time::sleep(Duration::from_millis(20)).await;
    connection.outbound().push(Bytes::from_static(b"2"));
    connection.close(CloseReason::Inactive);
    let (batches, reason) = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("writer finished")
        .unwrap();
    assert_eq!(reason, CloseReason::Inactive);
    let frames: Vec<Bytes> = batches.into_iter().flatten().collect();
    assert_eq!(
        frames,
        vec![Bytes::from_static(b"1"), Bytes::from_static(b"2")]
    );
}
