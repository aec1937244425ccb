//! The broker core against a recording sink.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::*;
use crate::taskq::{Scheduler, SchedulerConfig};
use bytes::Bytes;

static NEXT_SINK: AtomicU64 = AtomicU64::new(1);

/// (subscription id, topic, seq, payload, retained) of one delivery.
type Got = (String, String, u64, Vec<u8>, bool);

#[derive(Default)]
struct Recorder {
    id: u64,
    got: Mutex<Vec<Got>>,
    closed: AtomicBool,
}

impl Recorder {
    fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            id: NEXT_SINK.fetch_add(1, Ordering::Relaxed),
            ..Recorder::default()
        })
    }

    fn take(&self) -> Vec<Got> {
        std::mem::take(&mut self.got.lock().unwrap())
    }

    fn payloads(&self) -> Vec<String> {
        self.take()
            .into_iter()
            .map(|(sub, topic, _, p, retained)| {
                format!(
                    "{sub}:{topic}:{}{}",
                    String::from_utf8(p).unwrap(),
                    if retained { "(r)" } else { "" }
                )
            })
            .collect()
    }
}

impl Sink for Recorder {
    fn id(&self) -> u64 {
        self.id
    }
    fn deliver(&self, sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome {
        if self.closed.load(Ordering::Relaxed) {
            return DeliveryOutcome::Closed;
        }
        self.got.lock().unwrap().push((
            sub.id.to_string(),
            msg.topic.to_string(),
            msg.seq,
            msg.payload.to_vec(),
            msg.retained,
        ));
        DeliveryOutcome::Queued
    }
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }
}

fn sub(sink: &Arc<Recorder>, id: &str, filter: &str) -> Subscription {
    Subscription::new(sink.clone(), id, filter, crate::broker::SubTag::None, None)
}

fn msg(topic: &str, payload: &str) -> Publish {
    Publish {
        topic: topic.into(),
        payload: Bytes::copy_from_slice(payload.as_bytes()),
        ..Publish::default()
    }
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    actix_rt::System::new().block_on(f)
}

fn broker() -> (Scheduler, Broker) {
    let s = Scheduler::new(&SchedulerConfig {
        workers: 1,
        ..SchedulerConfig::default()
    })
    .unwrap();
    let b = Broker::new(s.handle());
    (s, b)
}

#[test]
fn exact_and_wildcard_subscriptions_receive_matching_publishes() {
    let (_s, b) = broker();
    let r = Recorder::new();
    run(async {
        b.subscribe(sub(&r, "plus", "a/+")).await.unwrap();
        b.subscribe(sub(&r, "exact", "a/b")).await.unwrap();
        b.publish(msg("a/b", "1")).await.unwrap();
        b.subscribe(sub(&r, "hash", "#")).await.unwrap();
        b.publish(msg("a/c", "2")).await.unwrap();
        b.publish(msg("a/b/c", "3")).await.unwrap();
        b.publish(msg("$sys/x", "4")).await.unwrap();
    });
    let mut got = r.payloads();
    got.sort();
    assert_eq!(
        got,
        [
            "exact:a/b:1",
            "hash:a/b/c:3",
            "hash:a/c:2",
            "plus:a/b:1",
            "plus:a/c:2"
        ]
    );
}

#[test]
fn publishing_to_a_topic_nobody_wants_creates_nothing() {
    let (_s, b) = broker();
    run(async {
        let out = b.publish(msg("nobody/here", "x")).await.unwrap();
        assert_eq!(out, PublishOutcome::default());
    });
    assert_eq!(b.stats().topics, 0);
}

#[test]
fn retained_message_goes_first_to_new_subscribers_and_empty_clears_it() {
    let (_s, b) = broker();
    let r = Recorder::new();
    run(async {
        let mut m = msg("t", "old");
        m.retain = true;
        b.publish(m.clone()).await.unwrap();
        m.payload = Bytes::from_static(b"last");
        b.publish(m.clone()).await.unwrap();
        b.subscribe(sub(&r, "s1", "t")).await.unwrap();
        b.publish(msg("t", "live")).await.unwrap();
        b.subscribe(sub(&r, "s2", "+")).await.unwrap();
        m.payload = Bytes::new();
        b.publish(m).await.unwrap();
        b.subscribe(sub(&r, "s3", "t")).await.unwrap();
    });
    assert_eq!(
        r.payloads(),
        [
            "s1:t:last(r)",
            "s1:t:live",
            "s2:t:last(r)",
            "s1:t:",
            "s2:t:"
        ]
    );
}

#[test]
fn unsubscribe_stops_deliveries() {
    let (_s, b) = broker();
    let r = Recorder::new();
    run(async {
        b.subscribe(sub(&r, "e", "x/y")).await.unwrap();
        b.subscribe(sub(&r, "w", "x/#")).await.unwrap();
        b.publish(msg("x/y", "1")).await.unwrap();
        b.unsubscribe(r.id, "e", "x/y").await.unwrap();
        b.publish(msg("x/y", "2")).await.unwrap();
        b.unsubscribe(r.id, "w", "x/#").await.unwrap();
        b.publish(msg("x/y", "3")).await.unwrap();
        b.publish(msg("x/z", "4")).await.unwrap();
    });
    let mut got = r.payloads();
    got.sort();
    assert_eq!(got, ["e:x/y:1", "w:x/y:1", "w:x/y:2"]);
    assert_eq!(b.stats().wildcard_subscriptions, 0);
}

#[test]
fn closed_sinks_are_forgotten_and_idle_topics_swept() {
    let (_s, b) = broker();
    let r = Recorder::new();
    run(async {
        b.subscribe(sub(&r, "s", "gone")).await.unwrap();
        assert_eq!(b.topic_info("gone").await, Some((1, false, 0)));
        r.closed.store(true, Ordering::Relaxed);
        b.publish(msg("gone", "x")).await.unwrap();
        assert_eq!(b.topic_info("gone").await, Some((0, false, 1)));
        assert_eq!(b.sweep_idle().await, 0, "used since the last sweep");
        assert_eq!(b.sweep_idle().await, 1);
        assert_eq!(b.stats().topics, 0);
        // A new subscriber and publisher meet on a fresh topic.
        let r2 = Recorder::new();
        b.subscribe(sub(&r2, "s", "gone")).await.unwrap();
        let out = b.publish(msg("gone", "again")).await.unwrap();
        assert_eq!((out.delivered, out.seq), (1, 1));
        assert_eq!(r2.payloads(), ["s:gone:again"]);
    });
}

#[test]
fn retained_topics_survive_the_sweep() {
    let (_s, b) = broker();
    run(async {
        let mut m = msg("keep", "v");
        m.retain = true;
        b.publish(m).await.unwrap();
        assert_eq!(b.sweep_idle().await, 0);
        assert_eq!(b.sweep_idle().await, 0);
        let r = Recorder::new();
        b.subscribe(sub(&r, "s", "keep")).await.unwrap();
        assert_eq!(r.payloads(), ["s:keep:v(r)"]);
    });
}

#[test]
fn invalid_names_are_refused() {
    let (_s, b) = broker();
    let r = Recorder::new();
    run(async {
        assert!(matches!(
            b.publish(msg("a/+", "x")).await,
            Err(BrokerError::InvalidTopic(_))
        ));
        assert!(matches!(
            b.subscribe(sub(&r, "s", "a/#/b")).await,
            Err(BrokerError::InvalidFilter(_))
        ));
    });
}

#[test]
fn per_publisher_order_holds_across_threads() {
    let (_s, b) = broker();
    let r = Recorder::new();
    run(b.subscribe(sub(&r, "s", "o/+"))).unwrap();
    let threads: Vec<_> = (0..3)
        .map(|p| {
            let b = b.clone();
            std::thread::spawn(move || {
                run(async {
                    for i in 0..500 {
                        b.publish(msg("o/t", &format!("{p}:{i}"))).await.unwrap();
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let got = r.take();
    assert_eq!(got.len(), 1500);
    for p in 0..3 {
        let seq: Vec<u32> = got
            .iter()
            .filter_map(|(_, _, _, payload, _)| {
                let s = String::from_utf8(payload.clone()).unwrap();
                let (who, i) = s.split_once(':').unwrap();
                (who == p.to_string()).then(|| i.parse().unwrap())
            })
            .collect();
        assert_eq!(seq, (0..500).collect::<Vec<_>>());
    }
    let seqs: Vec<u64> = got.iter().map(|g| g.2).collect();
    assert_eq!(
        seqs,
        (1..=1500).collect::<Vec<_>>(),
        "topic sequence is gapless"
    );
}

#[test]
fn a_cancelled_subscription_gets_nothing_more_and_is_dropped() {
    let (_s, b) = broker();
    let r = Recorder::new();
    run(async {
        let s = sub(&r, "w", "c/#");
        b.subscribe(s.clone()).await.unwrap();
        b.publish(msg("c/1", "before")).await.unwrap();
        s.cancel();
        b.publish(msg("c/1", "after")).await.unwrap();
        assert_eq!(b.topic_info("c/1").await, Some((0, false, 2)));
    });
    assert_eq!(r.payloads(), ["w:c/1:before"]);
}

#[test]
fn topics_past_the_limit_are_refused_and_existing_ones_keep_working() {
    let s = Scheduler::new(&SchedulerConfig::default()).unwrap();
    let topics = crate::config::TopicsConfig {
        max_topics: 2,
        ..Default::default()
    };
    let b = Broker::build(s.handle(), None, &topics);
    let r = Recorder::new();
    run(async {
        b.subscribe(sub(&r, "1", "t/1")).await.unwrap();
        b.subscribe(sub(&r, "2", "t/2")).await.unwrap();
        assert_eq!(
            b.subscribe(sub(&r, "3", "t/3")).await,
            Err(BrokerError::TooManyTopics(2))
        );
        let mut m = msg("t/4", "x");
        m.retain = true;
        assert_eq!(b.publish(m).await, Err(BrokerError::TooManyTopics(2)));
        // A plain publish to a new name creates nothing and is no error.
        assert_eq!(b.publish(msg("t/5", "x")).await.map(|o| o.delivered), Ok(0));
        assert_eq!(
            b.publish(msg("t/1", "ok")).await.map(|o| o.delivered),
            Ok(1)
        );
    });
    assert_eq!(b.stats().topics, 2);
}
