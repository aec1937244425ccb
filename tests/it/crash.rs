//! Durability across kill -9: the broker runs as a child process, clients
//! publish retained messages with receipts, the broker is killed with
//! SIGKILL mid-stream and restarted on the same data directory; every
//! retained message whose receipt arrived must be there.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{ChildBroker, block_on};
use wharf::client::{Client, ClientOptions};

fn spawn(data: &std::path::Path) -> (ChildBroker, String) {
    let broker = ChildBroker::serve(data);
    let url = format!("ws://{}/ws", broker.address());
    (broker, url)
}

#[test]
fn confirmed_retained_messages_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut broker, url) = spawn(&data);

    // Three publishers overwrite retained values on 50 topics each; a
    // topic's value is confirmed when its receipt arrives.
    let confirmed: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let publishers: Vec<_> = (0..3)
        .map(|p| {
            let (url, confirmed, stop) = (url.clone(), confirmed.clone(), stop.clone());
            std::thread::spawn(move || {
                block_on(async move {
                    let Ok(c) = Client::connect(&url, ClientOptions::default()).await else {
                        return;
                    };
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) && n < 100_000 {
                        let topic = format!("r/{p}/{}", n % 50);
                        let sent = c.publish_retained(&topic, n.to_be_bytes().to_vec()).await;
                        match sent {
                            Ok(()) => {
                                confirmed.lock().unwrap().insert(topic, n);
                            }
                            Err(_) => return,
                        }
                        n += 1;
                    }
                })
            })
        })
        .collect();
    // Let them run until every topic has a value and a while longer, then
    // kill the broker in the middle of it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while confirmed.lock().unwrap().len() < 150 {
        assert!(
            std::time::Instant::now() < deadline,
            "publishers made no progress"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    broker.signal("KILL");
    let status = broker.wait_exit(Duration::from_secs(10));
    assert!(!status.success(), "it was killed");
    stop.store(true, Ordering::Relaxed);
    for p in publishers {
        p.join().unwrap();
    }
    // Values confirmed before the kill; a later, unconfirmed write may have
    // landed too, so the stored value may be newer, never older.
    let confirmed = confirmed.lock().unwrap().clone();
    assert_eq!(confirmed.len(), 150);

    let (_broker, url) = spawn(&data);
    let found = block_on(async move {
        let c = Client::connect(&url, ClientOptions::default())
            .await
            .unwrap();
        let mut sub = c.subscribe("r/#").await.unwrap();
        let mut found = BTreeMap::new();
        while let Some(m) = sub.recv_timeout(Duration::from_secs(2)).await {
            assert!(m.retained);
            let v = u64::from_be_bytes(m.payload[..8].try_into().unwrap());
            found.insert(m.topic, v);
        }
        found
    });
    let mut newer = 0;
    for (topic, value) in &confirmed {
        let got = found
            .get(topic)
            .unwrap_or_else(|| panic!("{topic} was confirmed but is gone"));
        assert!(got >= value, "{topic}: stored {got}, confirmed {value}");
        if got > value {
            newer += 1;
        }
    }
    // Reported, as the issue asks: unconfirmed writes that survived.
    eprintln!(
        "{} topics confirmed; {newer} hold a newer, unconfirmed value",
        confirmed.len()
    );
}

#[test]
fn confirmed_queue_messages_and_acks_survive_kill_9() {
    use std::collections::{BTreeSet, HashMap};
    use wharf::client::EnqueueOptions;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut broker, url) = spawn(&data);

    // Four publishers enqueue pipelined with receipts; one consumer acks
    // with receipts. Payload = "p:n".
    let enqueued: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    // Acks sent whose receipt may not have arrived: such a message may be
    // gone or not.
    let ack_sent: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let delivered: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads: Vec<_> = (0..4)
        .map(|p| {
            let (url, enqueued, stop) = (url.clone(), enqueued.clone(), stop.clone());
            std::thread::spawn(move || {
                block_on(async move {
                    let Ok(c) = Client::connect(&url, ClientOptions::default()).await else {
                        return;
                    };
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) && n < 1_000_000 {
                        let mut waits = Vec::new();
                        for _ in 0..64 {
                            let payload = format!("{p}:{n}");
                            n += 1;
                            match c
                                .enqueue_pipelined(
                                    "crash",
                                    payload.clone().into_bytes(),
                                    EnqueueOptions::default(),
                                )
                                .await
                            {
                                Ok(w) => waits.push((payload, w)),
                                Err(_) => return,
                            }
                        }
                        for (payload, w) in waits {
                            match w.await {
                                Ok(_) => {
                                    enqueued.lock().unwrap().insert(payload);
                                }
                                Err(_) => return,
                            }
                        }
                    }
                })
            })
        })
        .collect();
    {
        let (url, acked, delivered, stop) =
            (url.clone(), acked.clone(), delivered.clone(), stop.clone());
        let ack_sent = ack_sent.clone();
        threads.push(std::thread::spawn(move || {
            block_on(async move {
                let Ok(c) = Client::connect(&url, ClientOptions::default()).await else {
                    return;
                };
                let Ok(mut k) = c.consume("crash", 50).await else {
                    return;
                };
                let mut unacked = 0;
                while !stop.load(Ordering::Relaxed) {
                    let Some(d) = k.recv_timeout(Duration::from_secs(1)).await else {
                        continue;
                    };
                    let payload = String::from_utf8(d.payload).unwrap();
                    delivered.lock().unwrap().insert(payload.clone());
                    // Some deliveries are left unacknowledged (fewer than the
                    // prefetch): in flight at the crash, they must come back
                    // with their count raised.
                    if d.seq % 3 == 0 && unacked < 20 {
                        unacked += 1;
                        continue;
                    }
                    ack_sent.lock().unwrap().insert(payload.clone());
                    match c.ack(k.id(), &[d.id]).await {
                        Ok(()) => {
                            acked.lock().unwrap().insert(payload);
                        }
                        Err(_) => return,
                    }
                }
            })
        }));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while enqueued.lock().unwrap().len() < 3000 || acked.lock().unwrap().len() < 300 {
        assert!(
            std::time::Instant::now() < deadline,
            "no progress: {} enqueued, {} acked",
            enqueued.lock().unwrap().len(),
            acked.lock().unwrap().len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    broker.signal("KILL");
    let status = broker.wait_exit(Duration::from_secs(10));
    assert!(!status.success(), "it was killed");
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let enqueued = enqueued.lock().unwrap().clone();
    let acked = acked.lock().unwrap().clone();
    let delivered = delivered.lock().unwrap().clone();
    let ack_sent = ack_sent.lock().unwrap().clone();

    let (_broker, url) = spawn(&data);
    let found: HashMap<String, u32> = block_on(async move {
        let c = Client::connect(&url, ClientOptions::default())
            .await
            .unwrap();
        let mut k = c.consume("crash", 1000).await.unwrap();
        let mut found = HashMap::new();
        while let Some(d) = k.recv_timeout(Duration::from_secs(2)).await {
            let payload = String::from_utf8(d.payload).unwrap();
            assert!(
                found.insert(payload.clone(), d.count).is_none(),
                "{payload} delivered twice after the restart"
            );
            c.ack_nowait(k.id(), &[d.id]).await.unwrap();
        }
        found
    });
    for m in &enqueued {
        assert!(
            found.contains_key(m) || ack_sent.contains(m),
            "{m} was confirmed, never acked, and is gone ({} found, {} enqueued)",
            found.len(),
            enqueued.len()
        );
    }
    for m in &acked {
        assert!(
            !found.contains_key(m),
            "{m} was acked (confirmed) and came back"
        );
    }
    let mut raised = 0;
    for (m, count) in &found {
        if delivered.contains(m) {
            assert!(*count >= 2, "{m} was in flight at the crash; count {count}");
            raised += 1;
        }
    }
    assert!(raised > 0, "deliveries were left in flight at the crash");
    let unconfirmed = found.keys().filter(|m| !enqueued.contains(*m)).count();
    eprintln!(
        "{} enqueues confirmed, {} acks confirmed; after the restart {} messages: \
         {raised} were in flight at the crash (count raised), {unconfirmed} were never confirmed",
        enqueued.len(),
        acked.len(),
        found.len()
    );
}
