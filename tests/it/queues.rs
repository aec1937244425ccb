//! Durable queues over real WebSockets and HTTP on loopback.

use crate::common;

use std::time::{Duration, Instant};

use common::{TestBroker, block_on, http};
use wharf::client::{Client, ClientOptions, EnqueueOptions};
use wharf::protocol::frame::ErrorCode;
use wharf::store::compact::dir_size;

const T: Duration = Duration::from_secs(10);

async fn connect(b: &TestBroker) -> Client {
    Client::connect(&b.ws_url(), ClientOptions::default())
        .await
        .expect("connect")
}

fn info(b: &TestBroker, queue: &str) -> serde_json::Value {
    let (status, body) = http(b.addr, "GET", &format!("/queues/{queue}"), "");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn competing_consumers_share_a_queue_and_acks_delete() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let producer = connect(&b).await;
        let c1 = connect(&b).await;
        let c2 = connect(&b).await;
        let mut k1 = c1.consume("jobs", 5).await.unwrap();
        let mut k2 = c2.consume("jobs", 5).await.unwrap();
        for i in 0..20u32 {
            let seq = producer
                .enqueue("jobs", i.to_be_bytes().to_vec())
                .await
                .unwrap();
            assert_eq!(seq, u64::from(i) + 1);
        }
        let mut seen = Vec::new();
        let mut per = [0, 0];
        while seen.len() < 20 {
            tokio::select! {
                Some(d) = k1.recv() => { per[0] += 1; seen.push(d.seq); c1.ack(k1.id(), &[d.id]).await.unwrap(); }
                Some(d) = k2.recv() => { per[1] += 1; seen.push(d.seq); c2.ack(k2.id(), &[d.id]).await.unwrap(); }
                _ = actix_rt::time::sleep(T) => panic!("deliveries stopped at {}", seen.len()),
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (1..=20).collect::<Vec<u64>>(), "each exactly once");
        assert!(per[0] > 0 && per[1] > 0, "both consumers got work: {per:?}");
        let i = info(&b, "jobs");
        assert_eq!(i["depth"], 0, "{i}");
        assert_eq!(i["in_flight"], 0, "{i}");
        assert_eq!(i["consumers"], 2, "{i}");
        assert_eq!(i["stats"]["acked"], 20, "{i}");
        assert_eq!(i["dead_letter"], "jobs.dlq", "{i}");
    });
}

#[test]
fn prefetch_bounds_unacknowledged_deliveries() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = connect(&b).await;
        for i in 0..10u8 {
            c.enqueue("pf", vec![i]).await.unwrap();
        }
        let mut k = c.consume("pf", 3).await.unwrap();
        let mut got = Vec::new();
        while let Some(d) = k.recv_timeout(Duration::from_millis(300)).await {
            got.push(d);
        }
        assert_eq!(got.len(), 3, "prefetch 3");
        c.ack(k.id(), &[got[0].id, got[1].id]).await.unwrap();
        let mut more = 0;
        while k.recv_timeout(Duration::from_millis(300)).await.is_some() {
            more += 1;
        }
        assert_eq!(more, 2, "two acks free two credits");
        // An id that is not in flight is refused, and nothing changes.
        match c.ack(k.id(), &[got[2].id, 999_999]).await {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::UnknownDelivery)
            }
            other => panic!("expected unknown_delivery, got {other:?}"),
        }
        c.ack(k.id(), &[got[2].id]).await.unwrap();
    });
}

#[test]
fn http_enqueue_is_created_and_consumable() {
    let b = TestBroker::start(|_| {});
    let (status, body) = http(b.addr, "POST", "/queues/web/messages?priority=3", "hello");
    assert_eq!(status, 201, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["id"], 1);
    assert_eq!(v["queue"], "web");
    let (status, body) = http(b.addr, "POST", "/queues/web/messages?priority=12", "x");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_field"), "{body}");
    let (status, body) = http(b.addr, "GET", "/queues/nope", "");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("unknown_queue"), "{body}");
    block_on(async {
        let c = connect(&b).await;
        let mut k = c.consume("web", 1).await.unwrap();
        let d = k.recv_timeout(T).await.expect("the message");
        assert_eq!(d.payload, b"hello");
        assert_eq!(d.priority, 3);
        assert_eq!(d.count, 1);
        c.ack(k.id(), &[d.id]).await.unwrap();
    });
    assert_eq!(info(&b, "web")["depth"], 0);
}

#[test]
fn higher_priorities_first_fifo_within() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = connect(&b).await;
        let order = [(0u8, "a"), (5, "b"), (9, "c"), (5, "d"), (0, "e"), (9, "f")];
        for (p, v) in order {
            let o = EnqueueOptions {
                priority: p,
                ..EnqueueOptions::default()
            };
            c.enqueue_with("prio", v.as_bytes().to_vec(), o)
                .await
                .unwrap();
        }
        let mut k = c.consume("prio", 100).await.unwrap();
        let mut got = String::new();
        for _ in 0..6 {
            let d = k.recv_timeout(T).await.expect("a delivery");
            got.push_str(std::str::from_utf8(&d.payload).unwrap());
        }
        assert_eq!(got, "cfbdae");
    });
}

#[test]
fn ack_timeout_redelivers_and_touch_extends() {
    let b = TestBroker::start(|c| c.queue_defaults.ack_timeout_ms = 400);
    block_on(async {
        let c = connect(&b).await;
        c.enqueue("slow", b"one".to_vec()).await.unwrap();
        c.enqueue("slow", b"two".to_vec()).await.unwrap();
        let mut k = c.consume("slow", 2).await.unwrap();
        let a = k.recv_timeout(T).await.unwrap();
        let bb = k.recv_timeout(T).await.unwrap();
        let (touched, dropped) = if a.payload == b"one" {
            (a, bb)
        } else {
            (bb, a)
        };
        // Keep "one" alive past its timeout; let "two" time out.
        for _ in 0..4 {
            actix_rt::time::sleep(Duration::from_millis(200)).await;
            c.touch(k.id(), &[touched.id], Some(400)).await.unwrap();
        }
        let again = k
            .recv_timeout(T)
            .await
            .expect("the timed-out delivery again");
        // The redelivery and the touched one are still ours: acked at
        // once, in one frame, while surely within their 400 ms (a loaded
        // machine may take that long over a few round trips).
        c.ack(k.id(), &[again.id, touched.id]).await.unwrap();
        assert_eq!(again.seq, dropped.seq);
        assert_eq!(again.count, 2, "count raised");
        assert_ne!(again.id, dropped.id, "a new delivery id");
        // The old delivery id is gone.
        assert!(c.ack(k.id(), &[dropped.id]).await.is_err());
    });
}

#[test]
fn max_deliveries_and_reject_dead_letter_with_reasons_and_redrive_moves_back() {
    let b = TestBroker::start(|c| {
        c.queue_defaults.max_deliveries = 2;
        c.queue_defaults.backoff_ms = vec![];
    });
    block_on(async {
        let c = connect(&b).await;
        c.enqueue("work", b"poison".to_vec()).await.unwrap();
        c.enqueue("work", b"bad".to_vec()).await.unwrap();
        let mut k = c.consume("work", 1).await.unwrap();
        let mut deliveries = 0;
        let mut rejected = false;
        while let Some(d) = k.recv_timeout(Duration::from_millis(1500)).await {
            deliveries += 1;
            if d.payload == b"bad" {
                c.reject(k.id(), &[d.id]).await.unwrap();
                rejected = true;
            } else {
                c.nack(k.id(), &[d.id], None).await.unwrap();
            }
        }
        assert!(rejected);
        assert_eq!(deliveries, 3, "poison twice, bad once");
        let mut dlq = c.consume("work.dlq", 10).await.unwrap();
        let mut reasons = Vec::new();
        for _ in 0..2 {
            let d = dlq.recv_timeout(T).await.expect("a dead letter");
            assert_eq!(d.headers["dead-letter-from"], "work");
            reasons.push((
                String::from_utf8(d.payload.clone()).unwrap(),
                d.headers["dead-letter-reason"].clone(),
            ));
            c.nack(dlq.id(), &[d.id], Some(0)).await.unwrap();
        }
        reasons.sort();
        assert_eq!(
            reasons,
            vec![
                ("bad".into(), "rejected".into()),
                ("poison".into(), "max-deliveries".into())
            ]
        );
        c.cancel(dlq).await.unwrap();
        let w = info(&b, "work");
        assert_eq!(w["dead_letter_depth"], 2, "{w}");
        let (status, body) = http(b.addr, "POST", "/queues/work.dlq/redrive", "");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("\"moved\":2"), "{body}");
        let d = k.recv_timeout(T).await.expect("redriven");
        assert_eq!(d.count, 1, "count reset by the redrive");
        assert!(!d.headers.contains_key("dead-letter-reason"));
    });
}

#[test]
fn ttl_expires_to_the_dead_letter_queue_and_is_never_delivered() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = connect(&b).await;
        let o = EnqueueOptions {
            ttl_ms: Some(200),
            ..EnqueueOptions::default()
        };
        c.enqueue_with("ttl", b"short".to_vec(), o).await.unwrap();
        c.enqueue("ttl", b"long".to_vec()).await.unwrap();
        // Expired by the deadline check, before anyone consumes.
        assert!(
            common::eventually(T, || info(&b, "ttl")["dead_letter_depth"] == 1).await,
            "the expired message never reached the dead-letter queue: {}",
            info(&b, "ttl")
        );
        assert_eq!(info(&b, "ttl")["depth"], 1, "only the long-lived one left");
        let mut k = c.consume("ttl", 10).await.unwrap();
        let d = k.recv_timeout(T).await.unwrap();
        assert_eq!(d.payload, b"long");
        assert!(k.recv_timeout(Duration::from_millis(300)).await.is_none());
        let mut dlq = c.consume("ttl.dlq", 10).await.unwrap();
        let e = dlq.recv_timeout(T).await.expect("expired one");
        assert_eq!(e.payload, b"short");
        assert_eq!(e.headers["dead-letter-reason"], "expired");
    });
}

#[test]
fn nack_with_delay_waits_before_redelivery() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = connect(&b).await;
        c.enqueue("later", b"x".to_vec()).await.unwrap();
        let mut k = c.consume("later", 1).await.unwrap();
        let d = k.recv_timeout(T).await.unwrap();
        let t0 = Instant::now();
        c.nack(k.id(), &[d.id], Some(600)).await.unwrap();
        let again = k.recv_timeout(T).await.expect("redelivered");
        let waited = t0.elapsed();
        assert!(waited >= Duration::from_millis(550), "{waited:?}");
        assert_eq!(again.count, 2);
        assert_eq!(info(&b, "later")["in_flight"], 1);
    });
}

#[test]
fn a_consumer_that_disconnects_gives_its_deliveries_back_at_once() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let p = connect(&b).await;
        for i in 0..4u8 {
            p.enqueue("handoff", vec![i]).await.unwrap();
        }
        let first = connect(&b).await;
        let mut k1 = first.consume("handoff", 4).await.unwrap();
        for _ in 0..4 {
            k1.recv_timeout(T).await.unwrap();
        }
        let second = connect(&b).await;
        let mut k2 = second.consume("handoff", 10).await.unwrap();
        assert!(k2.recv_timeout(Duration::from_millis(200)).await.is_none());
        let t0 = Instant::now();
        drop(k1);
        first.close(false).await.unwrap();
        let mut got = Vec::new();
        for _ in 0..4 {
            let d = k2.recv_timeout(T).await.expect("handed over");
            assert_eq!(d.count, 2);
            got.push(d.payload[0]);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "not via the ack timeout"
        );
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2, 3]);
    });
}

#[test]
fn ten_thousand_durable_messages_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    block_on(async {
        let c = connect(&b).await;
        let mut waits = Vec::new();
        for i in 0..10_000u32 {
            let w = c
                .enqueue_pipelined("keep", i.to_be_bytes().to_vec(), EnqueueOptions::default())
                .await
                .unwrap();
            waits.push(w);
            if waits.len() >= 512 {
                for w in waits.drain(..) {
                    w.await.unwrap();
                }
            }
        }
        for w in waits {
            w.await.unwrap();
        }
    });
    b.stop().unwrap();
    // A small window: most of them come back from disk as consumers go.
    let b = TestBroker::start_in(&data, |c| c.queue_defaults.memory_window = 1000);
    assert_eq!(info(&b, "keep")["depth"], 10_000);
    block_on(async {
        let c = connect(&b).await;
        let mut k = c.consume("keep", 500).await.unwrap();
        let mut next = 0u32;
        while next < 10_000 {
            let d = k
                .recv_timeout(T)
                .await
                .unwrap_or_else(|| panic!("stopped at {next}"));
            assert_eq!(d.payload, next.to_be_bytes(), "in order");
            c.ack_nowait(k.id(), &[d.id]).await.unwrap();
            next += 1;
        }
        c.ping().await.unwrap();
    });
    let i = info(&b, "keep");
    assert_eq!(i["depth"], 0, "{i}");
}

fn named(id: &str) -> ClientOptions {
    ClientOptions {
        client_id: Some(id.into()),
        ..ClientOptions::default()
    }
}

#[test]
fn durable_subscription_keeps_messages_while_away_and_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    block_on(async {
        let c = Client::connect(&b.ws_url(), named("alice")).await.unwrap();
        let mut s = c.subscribe_durable("news", "news/#", 10).await.unwrap();
        let p = connect(&b).await;
        p.publish_confirmed("news/a", b"1".to_vec()).await.unwrap();
        let d = s.recv_timeout(T).await.expect("live delivery");
        assert_eq!(d.payload, b"1");
        assert_eq!(d.headers["topic"], "news/a");
        c.ack(s.id(), &[d.id]).await.unwrap();
        // Away: the session ends, the subscription stays.
        c.close(false).await.unwrap();
        for i in 2..=4u8 {
            p.publish_confirmed("news/b", vec![b'0' + i]).await.unwrap();
        }
        p.publish_confirmed("other", b"no".to_vec()).await.unwrap();
    });
    // The backlog is flushed asynchronously: give it a moment before the
    // restart.
    assert!(common::wait_until(Duration::from_secs(5), || {
        info(&b, "$durable/alice/news")["depth"] == 3
    }));
    b.stop().unwrap();
    let b = TestBroker::start_in(&data, |_| {});
    // Published while alice is away and after the restart: kept too.
    block_on(async {
        let p = connect(&b).await;
        p.publish_confirmed("news/c", b"5".to_vec()).await.unwrap();
    });
    // The copy is written asynchronously.
    assert!(
        common::wait_until(Duration::from_secs(5), || {
            info(&b, "$durable/alice/news")["depth"] == 4
        }),
        "the backlog never reached 4: {}",
        info(&b, "$durable/alice/news")
    );
    let backlog = info(&b, "$durable/alice/news");
    assert_eq!(backlog["depth"], 4, "{backlog}");
    block_on(async {
        let c = Client::connect(&b.ws_url(), named("alice")).await.unwrap();
        let mut s = c.subscribe_durable("news", "news/#", 10).await.unwrap();
        let mut got = Vec::new();
        for _ in 0..4 {
            let d = s.recv_timeout(T).await.expect("backlog");
            got.push(d.payload[0]);
            c.ack(s.id(), &[d.id]).await.unwrap();
        }
        assert_eq!(got, b"2345", "in order");
        assert!(s.recv_timeout(Duration::from_millis(200)).await.is_none());
        // Unsubscribing deletes the subscription and its backlog.
        c.cancel(s).await.unwrap();
    });
    let (status, _) = http(b.addr, "GET", "/queues/$durable/alice/news", "");
    assert_eq!(status, 404);
    block_on(async {
        // An anonymous client cannot subscribe durably.
        let anon = connect(&b).await;
        match anon.subscribe_durable("x", "news/#", 10).await {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::InvalidField)
            }
            other => panic!("expected invalid_field, got {other:?}"),
        }
    });
}

#[test]
fn a_declared_queue_collects_its_bound_topics() {
    let b = TestBroker::start(|c| {
        c.queues.push(wharf::config::QueueDecl {
            name: "orders".into(),
            bind: vec!["shop/+/orders".into()],
            max_deliveries: Some(9),
            ..Default::default()
        });
    });
    block_on(async {
        let p = connect(&b).await;
        p.publish_confirmed("shop/eu/orders", b"o1".to_vec())
            .await
            .unwrap();
        p.publish_confirmed("shop/eu/returns", b"r1".to_vec())
            .await
            .unwrap();
        p.publish_confirmed("shop/us/orders", b"o2".to_vec())
            .await
            .unwrap();
        let mut k = p.consume("orders", 10).await.unwrap();
        let a = k.recv_timeout(T).await.unwrap();
        let bb = k.recv_timeout(T).await.unwrap();
        assert_eq!(
            (a.payload.as_slice(), bb.payload.as_slice()),
            (&b"o1"[..], &b"o2"[..])
        );
        assert_eq!(bb.headers["topic"], "shop/us/orders");
        assert!(k.recv_timeout(Duration::from_millis(200)).await.is_none());
    });
}

#[test]
fn deleting_a_durable_subscriptions_queue_ends_it_and_a_new_subscribe_starts_afresh() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = Client::connect(&b.ws_url(), named("bob")).await.unwrap();
        let s = c.subscribe_durable("feed", "feed/#", 10).await.unwrap();
        drop(s);
        c.close(false).await.unwrap();
        let p = connect(&b).await;
        p.publish_confirmed("feed/x", b"old".to_vec())
            .await
            .unwrap();
    });
    assert!(common::wait_until(Duration::from_secs(5), || {
        info(&b, "$durable/bob/feed")["depth"] == 1
    }));
    let (status, body) = http(b.addr, "DELETE", "/queues/$durable/bob/feed", "");
    assert_eq!(status, 204, "{body}");
    block_on(async {
        let c = Client::connect(&b.ws_url(), named("bob")).await.unwrap();
        let mut s = c.subscribe_durable("feed", "feed/#", 10).await.unwrap();
        let p = connect(&b).await;
        p.publish_confirmed("feed/y", b"new".to_vec())
            .await
            .unwrap();
        let d = s.recv_timeout(T).await.expect("bound again");
        assert_eq!(d.payload, b"new", "the old backlog went with the queue");
        c.ack(s.id(), &[d.id]).await.unwrap();
    });
}

#[test]
fn a_draining_delete_refuses_enqueues_lets_consumers_finish_then_removes_the_queue() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let producer = connect(&b).await;
        for i in 0..3u8 {
            producer.enqueue("drained", vec![i]).await.unwrap();
        }
        let c = connect(&b).await;
        let mut k = c.consume("drained", 1).await.unwrap();
        let first = k.recv_timeout(T).await.expect("first delivery");
        let (status, body) = http(b.addr, "DELETE", "/queues/drained?drain=true", "");
        assert_eq!(status, 202, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["draining"], true, "{v}");
        assert_eq!(v["waiting"], 2, "{v}");
        assert_eq!(v["in_flight"], 1, "{v}");
        assert_eq!(info(&b, "drained")["draining"], true);
        // No more messages in, by any way.
        match producer.enqueue("drained", b"late".to_vec()).await {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::Conflict)
            }
            other => panic!("expected conflict, got {other:?}"),
        }
        let (status, body) = http(b.addr, "POST", "/queues/drained/messages", "late");
        assert_eq!(status, 409, "{body}");
        // The consumer finishes what was there, a nack included.
        c.nack(k.id(), &[first.id], Some(0)).await.unwrap();
        let mut got = Vec::new();
        while got.len() < 3 {
            let d = k.recv_timeout(T).await.expect("the rest is delivered");
            got.push(d.payload[0]);
            c.ack(k.id(), &[d.id]).await.unwrap();
        }
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2]);
    });
    assert!(
        common::wait_until(Duration::from_secs(5), || {
            http(b.addr, "GET", "/queues/drained", "").0 == 404
        }),
        "the drained queue is removed"
    );
    // An empty queue drains at once; waiting lets a consumer finish.
    block_on(async {
        let p = connect(&b).await;
        p.enqueue("empty-soon", b"x".to_vec()).await.unwrap();
        let c = connect(&b).await;
        let mut k = c.consume("empty-soon", 1).await.unwrap();
        let d = k.recv_timeout(T).await.unwrap();
        let addr = b.addr;
        let deleting = std::thread::spawn(move || {
            http(
                addr,
                "DELETE",
                "/queues/empty-soon?drain=true&wait_ms=10000",
                "",
            )
        });
        assert!(
            common::eventually(T, || info(&b, "empty-soon")["draining"] == true).await,
            "draining"
        );
        c.ack(k.id(), &[d.id]).await.unwrap();
        let (status, body) = deleting.join().unwrap();
        assert_eq!(status, 204, "{body}");
    });
    let (status, _) = http(b.addr, "DELETE", "/queues/nothing-here?drain=true", "");
    assert_eq!(status, 404);
    let (status, _) = http(b.addr, "DELETE", "/queues/x?drain=true&wait_ms=999999", "");
    assert_eq!(status, 400);
}

#[test]
fn delete_queue_over_the_native_protocol_drains_or_removes_at_once() {
    use wharf::client::Deleted;
    let b = TestBroker::start(|_| {});
    block_on(async {
        let p = connect(&b).await;
        p.enqueue("native-drain", b"a".to_vec()).await.unwrap();
        p.enqueue("native-drain", b"b".to_vec()).await.unwrap();
        let c = connect(&b).await;
        let mut k = c.consume("native-drain", 1).await.unwrap();
        let first = k.recv_timeout(T).await.expect("first delivery");
        // Still held: the answer says what is left, and enqueues stop.
        assert_eq!(
            p.delete_queue("native-drain", true, Duration::ZERO)
                .await
                .unwrap(),
            Deleted::Draining {
                waiting: 1,
                in_flight: 1
            }
        );
        match p.enqueue("native-drain", b"late".to_vec()).await {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::Conflict)
            }
            other => panic!("expected conflict, got {other:?}"),
        }
        // A drain that waits: answered once the consumer settled the rest.
        let waiter = connect(&b).await;
        let deleting = actix_rt::spawn(async move {
            waiter
                .delete_queue("native-drain", true, Duration::from_secs(8))
                .await
        });
        c.ack(k.id(), &[first.id]).await.unwrap();
        let second = k.recv_timeout(T).await.expect("second delivery");
        c.ack(k.id(), &[second.id]).await.unwrap();
        assert_eq!(deleting.await.unwrap().unwrap(), Deleted::Removed);
        // Gone: a second delete names the queue it cannot find.
        match p.delete_queue("native-drain", false, Duration::ZERO).await {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::UnknownQueue)
            }
            other => panic!("expected unknown_queue, got {other:?}"),
        }
        // Without drain: at once, with what it holds.
        p.enqueue("native-now", b"x".to_vec()).await.unwrap();
        assert_eq!(
            p.delete_queue("native-now", false, Duration::ZERO)
                .await
                .unwrap(),
            Deleted::Removed
        );
        // Bad input is an error frame, and the session goes on.
        match p
            .delete_queue("native-now", true, Duration::from_secs(61))
            .await
        {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::InvalidField)
            }
            other => panic!("expected invalid_field, got {other:?}"),
        }
        p.enqueue("still-works", b"y".to_vec()).await.unwrap();
    });
    assert_eq!(http(b.addr, "GET", "/queues/native-now", "").0, 404);
}

#[test]
fn delete_queue_over_the_native_protocol_is_the_admins() {
    use wharf::config::auth::{Permissions, TokenConfig};
    let b = TestBroker::start(|c| {
        for (name, allow) in [
            (
                "svc",
                Permissions {
                    enqueue: vec!["q".into()],
                    consume: vec!["q".into()],
                    ..Permissions::default()
                },
            ),
            ("root", Permissions::everything()),
        ] {
            c.auth.tokens.push(TokenConfig {
                name: name.into(),
                token_sha256: wharf::auth::token_digest(&format!("{name}-token-for-tests")),
                allow,
            });
        }
    });
    block_on(async {
        let url = b.ws_url();
        let as_ = |name: &str| {
            let options = ClientOptions {
                token: Some(format!("{name}-token-for-tests")),
                ..ClientOptions::default()
            };
            Client::connect(&url, options)
        };
        let svc = as_("svc").await.unwrap();
        svc.enqueue("q", b"kept".to_vec()).await.unwrap();
        match svc.delete_queue("q", false, Duration::ZERO).await {
            Err(wharf::client::ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::Forbidden)
            }
            other => panic!("expected forbidden, got {other:?}"),
        }
        // Nothing was lost, and the session goes on.
        assert_eq!(svc.enqueue("q", b"more".to_vec()).await.unwrap(), 2);
        let root = as_("root").await.unwrap();
        assert_eq!(
            root.delete_queue("q", false, Duration::ZERO).await.unwrap(),
            wharf::client::Deleted::Removed
        );
    });
}

/// Enqueues `n` messages of 2 KiB to `queue` (confirmed), then consumes
/// and acks all but `keep` of them (the oldest first), over the broker's
/// WebSocket.
fn fill_and_drain(b: &TestBroker, queue: &str, n: u32, keep: u32) {
    block_on(async {
        let c = connect(b).await;
        let mut waits = Vec::new();
        for i in 0..n {
            let mut body = vec![0u8; 2048];
            body[..4].copy_from_slice(&i.to_be_bytes());
            waits.push(
                c.enqueue_pipelined(queue, body, EnqueueOptions::default())
                    .await
                    .unwrap(),
            );
            if waits.len() >= 512 {
                for w in waits.drain(..) {
                    w.await.unwrap();
                }
            }
        }
        for w in waits {
            w.await.unwrap();
        }
        let mut k = c.consume(queue, 500).await.unwrap();
        let mut left = n - keep;
        while left > 0 {
            let mut ids = Vec::new();
            while ids.len() < (left as usize).min(100) {
                let d = k
                    .recv_timeout(T)
                    .await
                    .unwrap_or_else(|| panic!("stopped with {left} to take"));
                ids.push(d.id);
            }
            c.ack(k.id(), &ids).await.unwrap();
            left -= ids.len() as u32;
        }
        c.cancel(k).await.unwrap();
    });
}

#[test]
fn drained_space_comes_back_at_a_restart_and_with_wharf_store_compact() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    fill_and_drain(&b, "big", 10_000, 2);
    b.stop().unwrap();
    let drained = dir_size(&data);

    // 20 MiB went through the store. The writer's log cleaning gives
    // most of it back as the queue drains (the file shrinks as its last
    // segments come free); the next start compacts what is left if the
    // files are still four times what is live and 8 MiB more
    // (`compact::tests` holds that case). Either way the space is back,
    // and the two messages left are still there, in order.
    let b = TestBroker::start_in(&data, |_| {});
    // Answered once the store is open (and compacted).
    assert_eq!(info(&b, "big")["depth"], 2);
    let after = dir_size(&data);
    assert!(after < 10 << 20, "{drained} -> {after} bytes");
    block_on(async {
        let c = connect(&b).await;
        let mut k = c.consume("big", 10).await.unwrap();
        for i in 10_000u32 - 2..10_000 {
            let d = k.recv_timeout(T).await.expect("a kept message");
            assert_eq!(d.payload[..4], i.to_be_bytes());
            c.ack(k.id(), &[d.id]).await.unwrap();
        }
    });

    // On demand, with the broker stopped (and refused while it runs).
    fill_and_drain(&b, "big", 10_000, 0);
    let wharf = env!("CARGO_BIN_EXE_wharf");
    let run = |data: &std::path::Path| {
        std::process::Command::new(wharf)
            .args(["store", "compact", "--data-dir"])
            .arg(data)
            .output()
            .unwrap()
    };
    let busy = run(&data);
    assert!(!busy.status.success());
    let said = String::from_utf8_lossy(&busy.stderr);
    assert!(said.contains("in use by another process"), "{said}");
    b.stop().unwrap();
    let drained = dir_size(&data);
    let done = run(&data);
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(said.starts_with("compacted "), "{said}");
    let after = dir_size(&data);
    assert!(after < 2 << 20, "{drained} -> {after} bytes");
    let b = TestBroker::start_in(&data, |_| {});
    assert_eq!(info(&b, "big")["depth"], 0);
}

#[test]
fn an_enqueue_sent_again_with_its_message_id_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    let once = || EnqueueOptions::default().msg_id("order-17");
    block_on(async {
        let c = connect(&b).await;
        let first = c
            .enqueue_with("orders", b"a".to_vec(), once())
            .await
            .unwrap();
        let again = c
            .enqueue_with("orders", b"a".to_vec(), once())
            .await
            .unwrap();
        assert_eq!(again, first, "the retry gets the first one's seq");
        let other = c
            .enqueue_with(
                "orders",
                b"b".to_vec(),
                EnqueueOptions::default().msg_id("order-18"),
            )
            .await
            .unwrap();
        assert_eq!(other, first + 1);
    });
    // Over HTTP with the standard header, and with x-wharf-msg-id.
    for extra in ["Idempotency-Key: pay-1\r\n", "x-wharf-msg-id: pay-1\r\n"] {
        let (code, _, body) =
            common::http_request(b.addr, "POST", "/queues/orders/messages", extra, "p");
        assert_eq!(code, 201, "{body}");
        let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"].as_u64();
        assert_eq!(id, Some(3), "{extra}: {body}");
    }
    assert_eq!(info(&b, "orders")["depth"], 3);
    b.stop().unwrap();
    // After a restart the stored messages' ids are remembered again.
    let b = TestBroker::start_in(&data, |_| {});
    block_on(async {
        let c = connect(&b).await;
        let again = c
            .enqueue_with("orders", b"a".to_vec(), once())
            .await
            .unwrap();
        assert_eq!(again, 1);
    });
    assert_eq!(info(&b, "orders")["depth"], 3);
}

#[test]
fn without_a_dedupe_window_a_repeated_id_is_a_new_message() {
    let b = TestBroker::start(|c| c.queue_defaults.dedupe_window_ms = 0);
    block_on(async {
        let c = connect(&b).await;
        let id = || EnqueueOptions::default().msg_id("x");
        let first = c.enqueue_with("q", b"a".to_vec(), id()).await.unwrap();
        let second = c.enqueue_with("q", b"a".to_vec(), id()).await.unwrap();
        assert_eq!(second, first + 1);
    });
}
