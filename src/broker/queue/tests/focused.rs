//! Focused tests of single paths.

use super::*;

fn plain_queue(opts: QueueOptions) -> QueueState {
    QueueState::new(NAME.into(), 1, opts, None, None, Arc::default())
}

#[test]
fn returned_messages_go_back_to_their_place_within_a_priority() {
    let log = Log::default();
    let mut q = plain_queue(QueueOptions {
        max_deliveries: 0,
        backoff_ms: vec![],
        ack_timeout_ms: 60_000,
        ..QueueOptions::default()
    });
    let t = T0;
    for seq in 1..=6 {
        assert_eq!(q.enqueue(incoming(seq, 3, None), t).unwrap().0, seq);
    }
    assert_eq!(q.enqueue(incoming(7, 1, None), t).unwrap().0, 7);

    // A takes 1-3 and leaves: they go back ahead of 4-6.
    let a = TestSink::new(&log);
    q.consume(subscription(&a, "a"), 3, t).unwrap();
    let got: Vec<u64> = take_log(&log).iter().map(|x| x.seq).collect();
    assert_eq!(got, [1, 2, 3]);
    q.cancel(a.id, "a", t).unwrap();
    assert_eq!(ready_seqs(&q, 3), [1, 2, 3, 4, 5, 6]);
    assert_eq!(ready_seqs(&q, 1), [7]);

    // B takes 1-6; 5 and 2 come back after 500 ms, 4 after 1000 ms, and
    // 1, 3, 6 (and 7, delivered meanwhile) at once when B leaves.
    let b = TestSink::new(&log);
    q.consume(subscription(&b, "b"), 6, t).unwrap();
    let got: Vec<(u64, u64)> = take_log(&log).iter().map(|x| (x.seq, x.id)).collect();
    assert_eq!(
        got.iter().map(|x| x.0).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    let id = |seq: u64| got.iter().find(|x| x.0 == seq).unwrap().1;
    q.nack(b.id, "b", &[id(5), id(2)], Some(500), t).unwrap();
    q.nack(b.id, "b", &[id(4)], Some(1000), t).unwrap();
    let got: Vec<u64> = take_log(&log).iter().map(|x| x.seq).collect();
    assert_eq!(got, [7]);
    q.cancel(b.id, "b", t).unwrap();
    assert_eq!(ready_seqs(&q, 3), [1, 3, 6]);
    assert_eq!(ready_seqs(&q, 1), [7]);
    q.tick(t + 500);
    assert_eq!(ready_seqs(&q, 3), [1, 2, 3, 5, 6]);
    q.tick(t + 1000);
    assert_eq!(ready_seqs(&q, 3), [1, 2, 3, 4, 5, 6]);
    assert_eq!(q.info().delayed, 0);

    // C gets them in order: priority 3 by seq, then priority 1.
    let c = TestSink::new(&log);
    q.consume(subscription(&c, "c"), 10, t + 1000).unwrap();
    let got: Vec<(u64, u32)> = take_log(&log)
        .iter()
        .map(|x| (x.seq, x.deliveries))
        .collect();
    assert_eq!(
        got,
        [(1, 3), (2, 3), (3, 3), (4, 2), (5, 2), (6, 2), (7, 2)]
    );
}

#[test]
fn enqueue_past_max_length_is_refused_and_changes_nothing() {
    let log = Log::default();
    let mut q = plain_queue(QueueOptions {
        max_length: 3,
        ..QueueOptions::default()
    });
    let t = T0;
    for seq in 1..=3 {
        assert_eq!(q.enqueue(incoming(seq, 0, None), t).unwrap().0, seq);
    }
    // In-flight messages count too.
    let a = TestSink::new(&log);
    q.consume(subscription(&a, "a"), 1, t).unwrap();
    let first = take_log(&log);
    assert_eq!(first.iter().map(|x| x.seq).collect::<Vec<_>>(), [1]);

    let before = q.info();
    for priority in [0, 9] {
        let err = q.enqueue(incoming(4, priority, Some(100)), t).map(|x| x.0);
        assert_eq!(err, Err(QueueError::Full(3)));
    }
    // Only the refusals are counted.
    let mut after = q.info();
    assert_eq!(after.stats.refused, before.stats.refused + 2);
    after.stats.refused = before.stats.refused;
    assert_eq!(after, before);
    assert_eq!(before.stats.enqueued, 3);
    assert_eq!((before.depth, before.in_flight), (2, 1));
    assert_eq!(ready_seqs(&q, 0), [2, 3]);
    assert_eq!(ready_seqs(&q, 9), Vec::<u64>::new());
    assert_eq!(q.expiring, 0);
    assert!(take_log(&log).is_empty());

    // Room again after an ack; the refused enqueues used up no seq.
    q.ack(a.id, "a", &[first[0].id], t).unwrap();
    assert_eq!(
        take_log(&log).iter().map(|x| x.seq).collect::<Vec<_>>(),
        [2]
    );
    assert_eq!(q.enqueue(incoming(4, 0, None), t).unwrap().0, 4);
    assert_eq!(
        q.enqueue(incoming(5, 0, None), t).map(|x| x.0),
        Err(QueueError::Full(3))
    );
}

/// A redrive puts back the messages it could not place (`take_ready`, then
/// `put_back`, two tasks). A consumer that attached in between, with credit
/// and nothing in flight, must get them: nothing else will wake the queue
/// (it does not even ask for a tick).
#[test]
fn put_back_messages_go_to_a_waiting_consumer() {
    let log = Log::default();
    let mut q = plain_queue(QueueOptions::default());
    q.enqueue(incoming(1, 0, None), T0).unwrap();
    let taken: Vec<StoredMessage> = q.take_ready(10).into_iter().map(|(m, _)| m).collect();
    assert_eq!(taken.len(), 1);
    let a = TestSink::new(&log);
    q.consume(subscription(&a, "a"), 1, T0).unwrap();
    assert!(take_log(&log).is_empty());
    q.put_back(taken, T0);
    let got: Vec<u64> = take_log(&log).iter().map(|x| x.seq).collect();
    assert_eq!(
        got,
        [1],
        "consumer with credit left waiting: {:?}, needs_tick {}",
        q.info(),
        q.shared.needs_tick.load(Ordering::Acquire)
    );
}

#[test]
fn messages_arriving_one_at_a_time_alternate_between_consumers() {
    // The turn moves with a delivery only: a dispatch that finds no
    // message must not skip the consumer whose turn it is (before, every
    // message enqueued one at a time went to the last consumer).
    let log = Log::default();
    let mut q = plain_queue(QueueOptions::default());
    let (a, b) = (TestSink::new(&log), TestSink::new(&log));
    q.consume(subscription(&a, "a"), 100, T0).unwrap();
    q.consume(subscription(&b, "b"), 100, T0).unwrap();
    for seq in 1..=6 {
        q.enqueue(incoming(seq, 0, None), T0).unwrap();
    }
    let sinks: Vec<u64> = take_log(&log).iter().map(|x| x.sink).collect();
    assert_eq!(sinks, [a.id, b.id, a.id, b.id, a.id, b.id]);
}
