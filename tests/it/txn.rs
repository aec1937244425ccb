//! Transactions over real WebSockets: commit makes everything visible at
//! once, rollback leaves nothing and gives acked deliveries back, and
//! kill -9 before a commit leaves nothing while after its receipt nothing
//! is lost.

use crate::common;

use std::time::Duration;

use common::{ChildBroker, TestBroker, block_on, http};
use wharf::client::{Client, ClientError, ClientOptions};
use wharf::protocol::frame::ErrorCode;

const T: Duration = Duration::from_secs(10);
const QUIET: Duration = Duration::from_millis(300);

fn depth(addr: std::net::SocketAddr, queue: &str) -> (u64, u64) {
    let (status, body) = http(addr, "GET", &format!("/queues/{queue}"), "");
    if status == 404 {
        return (0, 0);
    }
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    (
        v["depth"].as_u64().unwrap(),
        v["in_flight"].as_u64().unwrap(),
    )
}

fn code(r: Result<(), ClientError>) -> ErrorCode {
    match r {
        Err(ClientError::Server { code, .. }) => code,
        other => panic!("expected a server error, got {other:?}"),
    }
}

#[test]
fn commit_makes_everything_visible_at_once() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        let watcher = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        c.enqueue("in", b"work".to_vec()).await.unwrap();
        let mut input = c.consume("in", 1).await.unwrap();
        let work = input.recv_timeout(T).await.unwrap();
        let mut out = watcher.consume("out", 10).await.unwrap();
        let mut news = watcher.subscribe("done").await.unwrap();

        c.begin().await.unwrap();
        assert_eq!(c.enqueue("out", b"r1".to_vec()).await.unwrap(), 0);
        c.enqueue("out", b"r2".to_vec()).await.unwrap();
        c.publish_confirmed("done", b"finished".to_vec())
            .await
            .unwrap();
        c.ack(input.id(), &[work.id]).await.unwrap();
        // Staged, not visible.
        assert!(out.recv_timeout(QUIET).await.is_none());
        assert!(news.recv_timeout(Duration::from_millis(10)).await.is_none());
        assert_eq!(depth(b.addr, "in"), (0, 1), "the ack is not applied yet");
        assert_eq!(depth(b.addr, "out"), (0, 0));

        c.commit().await.unwrap();
        let r1 = out.recv_timeout(T).await.unwrap();
        let r2 = out.recv_timeout(T).await.unwrap();
        assert_eq!(
            (r1.payload.as_slice(), r2.payload.as_slice()),
            (&b"r1"[..], &b"r2"[..])
        );
        assert_eq!(news.recv_timeout(T).await.unwrap().payload, b"finished");
        assert_eq!(depth(b.addr, "in"), (0, 0), "acked");
        // The acked delivery is settled: acking it again is refused.
        assert_eq!(
            code(c.ack(input.id(), &[work.id]).await),
            ErrorCode::UnknownDelivery
        );
    });
}

#[test]
fn rollback_leaves_nothing_and_gives_acked_deliveries_back() {
    let b = TestBroker::start(|c| c.session.max_transaction_ops = 3);
    block_on(async {
        let c = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        c.enqueue("in", b"work".to_vec()).await.unwrap();
        let mut input = c.consume("in", 1).await.unwrap();
        let work = input.recv_timeout(T).await.unwrap();
        // Watches the staged publish: it must never go out.
        let watcher = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        let mut never = watcher.subscribe("never").await.unwrap();
        assert_eq!(code(c.commit().await), ErrorCode::TransactionState);
        c.begin().await.unwrap();
        assert_eq!(code(c.begin().await), ErrorCode::TransactionState);
        c.enqueue("out", b"never".to_vec()).await.unwrap();
        c.publish_confirmed("never", b"x".to_vec()).await.unwrap();
        c.ack(input.id(), &[work.id]).await.unwrap();
        // The bound: a fourth operation is refused, the rest stays staged.
        assert_eq!(
            code(c.enqueue("out", b"4th".to_vec()).await.map(|_| ())),
            ErrorCode::TransactionTooLarge
        );
        c.rollback().await.unwrap();
        assert!(
            never.recv_timeout(QUIET).await.is_none(),
            "a rolled-back publish went out"
        );
        let again = input.recv_timeout(T).await.expect("given back");
        assert_eq!(again.seq, work.seq);
        assert_eq!(again.count, 2, "count raised");
        assert_eq!(depth(b.addr, "out"), (0, 0));
        // An ack of a delivery that is no longer in flight fails the whole
        // commit: nothing else takes effect.
        c.begin().await.unwrap();
        c.enqueue("out", b"nope".to_vec()).await.unwrap();
        c.ack(input.id(), &[work.id]).await.unwrap();
        assert_eq!(code(c.commit().await), ErrorCode::UnknownDelivery);
        assert_eq!(depth(b.addr, "out"), (0, 0));
        c.ack(input.id(), &[again.id]).await.unwrap();
    });
}

fn spawn(data: &std::path::Path) -> (ChildBroker, std::net::SocketAddr) {
    let broker = ChildBroker::serve(data);
    let addr = broker.address();
    (broker, addr)
}

#[test]
fn kill_9_before_commit_leaves_nothing_and_after_its_receipt_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut broker, addr) = spawn(&data);
    block_on(async {
        let c = Client::connect(&format!("ws://{addr}/ws"), ClientOptions::default())
            .await
            .unwrap();
        c.enqueue("src", b"a".to_vec()).await.unwrap();
        c.enqueue("src", b"b".to_vec()).await.unwrap();
        let mut k = c.consume("src", 2).await.unwrap();
        let a = k.recv_timeout(T).await.unwrap();
        let b2 = k.recv_timeout(T).await.unwrap();
        // Committed: ack "a", enqueue 10 results.
        c.begin().await.unwrap();
        for i in 0..10u8 {
            c.enqueue("dst", vec![i]).await.unwrap();
        }
        c.ack(k.id(), &[a.id]).await.unwrap();
        c.commit().await.unwrap();
        // Staged only: ack "b", enqueue 5 more.
        c.begin().await.unwrap();
        for i in 10..15u8 {
            c.enqueue("dst", vec![i]).await.unwrap();
        }
        c.ack(k.id(), &[b2.id]).await.unwrap();
        c.ping().await.unwrap();
    });
    broker.signal("KILL");
    assert!(!broker.wait_exit(Duration::from_secs(10)).success());
    let (_broker, addr) = spawn(&data);
    assert_eq!(
        depth(addr, "dst").0,
        10,
        "the committed ten, not the staged five"
    );
    block_on(async {
        let c = Client::connect(&format!("ws://{addr}/ws"), ClientOptions::default())
            .await
            .unwrap();
        let mut k = c.consume("src", 10).await.unwrap();
        let left = k.recv_timeout(T).await.expect("b is back");
        assert_eq!(left.payload, b"b", "a was acked by the commit");
        assert!(k.recv_timeout(QUIET).await.is_none());
        let mut d = c.consume("dst", 100).await.unwrap();
        let mut got = Vec::new();
        while let Some(m) = d.recv_timeout(QUIET).await {
            got.push(m.payload[0]);
        }
        assert_eq!(got, (0..10).collect::<Vec<u8>>());
    });
}
