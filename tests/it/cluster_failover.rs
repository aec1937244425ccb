//! Queues that survive their home (`[cluster] failover`): three nodes on
//! one `nats-server` with JetStream, the queue's home b a real `wharf`
//! binary killed with SIGKILL and never started again. Another member
//! takes the queue's lease, rebuilds it from the journal and serves it;
//! a consumer on c carries on without doing anything, and every
//! confirmed message reaches it.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::{ChildBroker, LONG, TestBroker, block_on, eventually};
use wharf::client::{Client, ClientOptions};

use crate::cluster::{Nats, NatsCluster, client, status};

const MEMBERS: [&str; 3] = ["a", "b", "c"];
/// Confirmed messages in the queue before its home dies.
const N: usize = 300;
/// A lease runs out this long after its holder stops renewing it.
const LEASE_MS: u64 = 2_000;

fn members() -> String {
    MEMBERS
        .iter()
        .map(|m| format!("\"{m}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Node `name` of the three, on `nats`, with failover (`lease_ms`) and
/// the queue `orders` homed on b.
fn failover_config(
    name: &str,
    nats: Vec<String>,
    lease_ms: u64,
) -> impl FnOnce(&mut wharf::Config) + use<> {
    let name = name.to_owned();
    move |c| {
        c.cluster.nats = nats;
        c.cluster.node = name;
        c.cluster.connect_timeout_ms = 2_000;
        c.cluster.members = MEMBERS.iter().map(|m| (*m).to_owned()).collect();
        c.cluster.failover = true;
        c.cluster.lease_ms = lease_ms;
        c.queues.push(wharf::config::QueueDecl {
            name: "orders".into(),
            home: Some("b".into()),
            ack_timeout_ms: Some(60_000),
            ..Default::default()
        });
    }
}

/// [`failover_config`]'s node started (and serving).
fn started(tune: impl FnOnce(&mut wharf::Config)) -> TestBroker {
    let node = TestBroker::start(tune);
    status(&node);
    node
}

fn failover_node(nats: Vec<String>, replicas: usize, name: &str) -> TestBroker {
    let tune = failover_config(name, nats, LEASE_MS);
    started(move |c| {
        tune(c);
        c.cluster.replicas = replicas;
    })
}

/// Node b as a `wharf serve` child process; the child and its WebSocket URL.
fn child_b(dir: &std::path::Path, nats: &[String], replicas: usize) -> (ChildBroker, String) {
    let config = dir.join("b.toml");
    let nats: Vec<String> = nats.iter().map(|u| format!("\"{u}\"")).collect();
    std::fs::write(
        &config,
        format!(
            "[cluster]\nnats = [{}]\nnode = \"b\"\nmembers = [{}]\n\
             connect_timeout_ms = 2000\nfailover = true\nlease_ms = {LEASE_MS}\n\
             replicas = {replicas}\n\n\
             [[queues]]\nname = \"orders\"\nhome = \"b\"\nack_timeout_ms = 60000\n",
            nats.join(", "),
            members()
        ),
    )
    .expect("b's config is written");
    let data = dir.join("b-data");
    let child = ChildBroker::serve_config(&config, &data);
    let url = format!("ws://{}/ws", child.address());
    (child, url)
}

/// A consumer of `orders` through `client`, once a node serves the queue
/// again (within 20 s).
async fn consume_once_served(client: &Client) -> wharf::client::Consumer {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.consume("orders", 100).await {
            Ok(k) => return k,
            Err(e) => {
                assert!(Instant::now() < deadline, "no home for orders: {e}");
                actix_rt::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn home_of(node: &TestBroker, queue: &str) -> Option<String> {
    let (code, body) = common::http(node.addr, "GET", &format!("/queues/{queue}"), "");
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["home"].as_str().map(str::to_owned)
}

#[test]
fn a_queue_whose_home_is_killed_is_served_by_another_member_with_every_confirmed_message() {
    let nats = Nats::start();
    let urls = |_| vec![nats.url()];
    home_killed(&urls, 1, || {});
}

/// Three NATS servers with the journal and the leases on three replicas;
/// b's machine dies: b and the NATS server it used are killed.
#[test]
fn on_a_three_server_nats_cluster_a_queue_survives_its_home_and_a_nats_server() {
    let mut nats = NatsCluster::start();
    let urls: Vec<Vec<String>> = (0..3).map(|i| nats.urls(i)).collect();
    let urls = |i: usize| urls[i].clone();
    let logs = std::cell::RefCell::new(String::new());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        home_killed(&urls, 3, || nats.servers[1].kill());
    }));
    if let Err(e) = result {
        *logs.borrow_mut() = nats.logs();
        eprintln!("{}", logs.borrow());
        std::panic::resume_unwind(e);
    }
}

/// Nodes a, b (a child process) and c, each on NATS server `urls(i)`
/// first; a queue homed on b holds N confirmed messages, c consumes a
/// part, then b is killed (and `also` runs): c gets the rest within 30 s
/// of the kill, from a survivor.
fn home_killed(urls: &dyn Fn(usize) -> Vec<String>, replicas: usize, also: impl FnOnce()) {
    let dir = tempfile::tempdir().expect("a directory for node b");
    let (mut b, b_url) = child_b(dir.path(), &urls(1), replicas);
    let a = failover_node(urls(0), replicas, "a");
    let c = failover_node(urls(2), replicas, "c");
    block_on(async {
        let on_b = Client::connect(&b_url, ClientOptions::default())
            .await
            .expect("a client on b");
        // b takes the queue's lease at its first call.
        on_b.enqueue("orders", "first")
            .await
            .expect("b serves its queue");
        let on_a = client(&a).await;
        let mut pending = Vec::with_capacity(N);
        for i in 0..N {
            let opts = wharf::client::EnqueueOptions::default();
            pending.push(
                on_a.enqueue_pipelined("orders", format!("m{i}").into_bytes(), opts)
                    .await
                    .expect("an enqueue on a, homed on b"),
            );
        }
        for p in pending {
            p.await.expect("confirmed by b, and journaled");
        }
        let on_c = client(&c).await;
        let mut consumer = on_c.consume("orders", 20).await.expect("a consumer on c");
        // The consumer takes and acks a part before b dies.
        let mut got = BTreeSet::new();
        while got.len() < 100 {
            let d = consumer
                .recv_timeout(LONG)
                .await
                .expect("a delivery from b on c");
            on_c.ack(consumer.id(), &[d.id])
                .await
                .expect("an ack through c");
            got.insert(String::from_utf8_lossy(&d.payload).into_owned());
        }

        b.child.kill().expect("SIGKILL node b");
        also();
        assert!(!b.wait_exit(LONG).success(), "b was killed");
        let killed = Instant::now();
        drop(on_b);

        // Nobody does anything: the consumer on c gets the rest from the
        // queue's new home (what was in flight at b comes again).
        let deadline = killed + Duration::from_secs(30);
        let mut redelivered = 0;
        let want = N + 1;
        while got.len() < want {
            let left = deadline.saturating_duration_since(Instant::now());
            let Some(d) = consumer.recv_timeout(left).await else {
                panic!(
                    "{} of {want} messages within 30 s of b's death; a: {}, c: {}",
                    got.len(),
                    status(&a),
                    status(&c)
                );
            };
            let text = String::from_utf8_lossy(&d.payload).into_owned();
            if !got.insert(text) {
                redelivered += 1;
            }
            // Acks go to whichever node serves the queue now; one to the
            // old home may fail while the consumer moves.
            let _ = on_c.ack(consumer.id(), &[d.id]).await;
        }
        let served = killed.elapsed();
        let home = home_of(&a, "orders").expect("a names the queue's home");
        assert!(home == "a" || home == "c", "a survivor is the home: {home}");
        let new_home = if home == "a" { &a } else { &c };
        let f = &status(new_home)["failover"];
        // The queue's lease (and maybe the jobs', whose home may be it).
        let leases = f["leases"].as_array().cloned().unwrap_or_default();
        assert!(leases.contains(&serde_json::json!("orders")), "{f}");
        assert!(f["taken_over"].as_u64() >= Some(1), "{f}");
        let (_, metrics) = common::http(new_home.addr, "GET", "/metrics", "");
        let held = metrics
            .lines()
            .find_map(|l| l.strip_prefix("wharf_cluster_leases "))
            .and_then(|n| n.trim().parse::<u64>().ok());
        assert!(held >= Some(1), "{metrics}");
        eprintln!(
            "all {want} messages on c {served:?} after b's death, home now {home}, \
             {redelivered} delivered twice"
        );
        // The queue keeps working: a new message, enqueued on a, reaches c.
        on_a.enqueue("orders", "after")
            .await
            .expect("an enqueue after the failover");
        loop {
            let d = consumer
                .recv_timeout(LONG)
                .await
                .expect("the message enqueued after the failover");
            let _ = on_c.ack(consumer.id(), &[d.id]).await;
            if &d.payload[..] == b"after" {
                break;
            }
        }
        assert!(
            eventually(LONG, || {
                let (code, body) = common::http(a.addr, "GET", "/queues/orders", "");
                code == 200 && body.contains("\"depth\":0")
            })
            .await,
            "every message acked at the new home"
        );
    });
}

/// A home that stops gives its leases up, so another member serves its
/// queues at once (well before the lease would run out); and a queue
/// deleted and made again on its home is journaled anew: what the new
/// home serves is exactly the confirmed messages since the deletion.
#[test]
fn a_home_that_stops_hands_its_queues_over_at_once_with_what_it_held() {
    let nats = Nats::start();
    let slow_lease = 60_000;
    let node = |name: &str| started(failover_config(name, vec![nats.url()], slow_lease));
    let (a, b, c) = (node("a"), node("b"), node("c"));
    // Asking about a queue nobody made makes none (its home takes the
    // name's lease and answers).
    let (code, body) = common::http(a.addr, "GET", "/queues/nobody", "");
    assert_eq!(code, 404, "{body}");
    for n in [&a, &b, &c] {
        let (_, listed) = common::http(n.addr, "GET", "/queues", "");
        assert!(!listed.contains("nobody"), "{listed}");
    }
    block_on(async {
        let on_b = client(&b).await;
        for i in 0..5 {
            on_b.enqueue("orders", format!("old{i}"))
                .await
                .expect("b serves its queue");
        }
        let (code, body) = common::http(b.addr, "DELETE", "/queues/orders", "");
        assert_eq!(code, 204, "{body}");
        let on_a = client(&a).await;
        for i in 0..50 {
            on_a.enqueue("orders", format!("new{i}"))
                .await
                .expect("an enqueue on a, homed on b again");
        }
        drop(on_b);
    });
    let stopped = Instant::now();
    b.stop().expect("b stops");
    block_on(async {
        let on_c = client(&c).await;
        let mut consumer = consume_once_served(&on_c).await;
        let mut got = BTreeSet::new();
        while got.len() < 50 {
            let d = consumer
                .recv_timeout(LONG)
                .await
                .unwrap_or_else(|| panic!("{} of 50 after b stopped", got.len()));
            on_c.ack(consumer.id(), &[d.id]).await.expect("an ack");
            got.insert(String::from_utf8_lossy(&d.payload).into_owned());
        }
        let want: BTreeSet<String> = (0..50).map(|i| format!("new{i}")).collect();
        assert_eq!(got, want, "the messages since the deletion, none before");
        let taken = stopped.elapsed();
        eprintln!("served again {taken:?} after b stopped");
        assert!(
            taken < Duration::from_millis(slow_lease / 2),
            "b's lease was given up, not left to run out: {taken:?}"
        );
        assert!(
            consumer
                .recv_timeout(Duration::from_millis(300))
                .await
                .is_none(),
            "nothing more (no deleted message came back)"
        );
    });
    drop((a, c));
}

/// The home's link to NATS is cut while clients on it and on the other
/// nodes keep enqueuing: another member takes the queue over, the old
/// home confirms nothing it could not journal, and every message any
/// client was told was stored reaches the consumer; once the link is
/// back, the old home sends its calls to the new one.
#[test]
fn a_home_cut_off_from_nats_loses_no_confirmed_message() {
    let nats = Nats::start();
    let nats_port: u16 = nats.url().rsplit(':').next().unwrap().parse().unwrap();
    let proxy = Proxy::start(nats_port);
    let node = |name: &str, url: String| started(failover_config(name, vec![url], LEASE_MS));
    let (a, b, c) = (
        node("a", nats.url()),
        node("b", proxy.url()),
        node("c", nats.url()),
    );
    block_on(async {
        let (on_a, on_b) = (client(&a).await, client(&b).await);
        let mut confirmed = BTreeSet::new();
        for i in 0..100 {
            let m = format!("before{i}");
            on_a.enqueue("orders", m.as_str())
                .await
                .expect("b serves orders");
            confirmed.insert(m);
        }
        // A consumer on b itself, of b's own queue (prefetch 1, acks
        // nothing: it holds one message in flight at most).
        let on_b_consumer = client(&b).await;
        let mut on_b_queue = on_b_consumer
            .consume("orders", 1)
            .await
            .expect("a consumer on the home");
        let mut got = BTreeSet::new();
        let first = on_b_queue
            .recv_timeout(LONG)
            .await
            .expect("a delivery on b");
        got.insert(String::from_utf8_lossy(&first.payload).into_owned());
        proxy.cut();
        let cut = Instant::now();
        // Both sides keep enqueuing through the cut and the takeover.
        let (mut refused_on_b, mut refused_on_a) = (0, 0);
        let mut i = 0;
        while cut.elapsed() < Duration::from_secs(10) {
            for (who, on, refused) in [
                ("b", &on_b, &mut refused_on_b),
                ("a", &on_a, &mut refused_on_a),
            ] {
                let m = format!("during-{who}{i}");
                let sent = actix_rt::time::timeout(
                    Duration::from_secs(1),
                    on.enqueue("orders", m.as_str()),
                );
                match sent.await {
                    Ok(Ok(_)) => {
                        confirmed.insert(m);
                    }
                    _ => *refused += 1,
                }
            }
            i += 1;
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
        let after_cut = confirmed.len();
        // What b's consumer had before: nothing more comes from b's own
        // copy of the queue, which b no longer serves.
        while let Some(d) = on_b_queue.recv_timeout(Duration::from_millis(300)).await {
            got.insert(String::from_utf8_lossy(&d.payload).into_owned());
        }
        proxy.heal();
        // Back on NATS, b is not the home any more: its calls go there.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match on_b.enqueue("orders", "after-heal").await {
                Ok(_) => break,
                Err(e) => {
                    assert!(Instant::now() < deadline, "b never forwarded again: {e}");
                    actix_rt::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        confirmed.insert("after-heal".into());
        // b's consumer follows the queue to its new home and is served
        // from there (it is the only consumer yet).
        let d = on_b_queue
            .recv_timeout(LONG)
            .await
            .expect("b's consumer is served by the queue's new home");
        on_b_consumer
            .ack(on_b_queue.id(), &[d.id])
            .await
            .expect("its ack goes to the new home");
        got.insert(String::from_utf8_lossy(&d.payload).into_owned());
        drop(on_b_queue);
        on_b_consumer
            .close(false)
            .await
            .expect("b's consumer closes");
        let on_c = client(&c).await;
        let mut consumer = on_c.consume("orders", 100).await.expect("a consumer on c");
        while !confirmed.is_subset(&got) {
            let Some(d) = consumer.recv_timeout(LONG).await else {
                let missing: Vec<&String> = confirmed.difference(&got).take(10).collect();
                panic!(
                    "{} confirmed messages never came, e.g. {missing:?}; a: {}",
                    confirmed.difference(&got).count(),
                    status(&a)
                );
            };
            let _ = on_c.ack(consumer.id(), &[d.id]).await;
            got.insert(String::from_utf8_lossy(&d.payload).into_owned());
        }
        eprintln!(
            "{after_cut} confirmed through the cut ({refused_on_b} refused on b, {refused_on_a} on a), \
             all delivered; home now {:?}",
            home_of(&a, "orders")
        );
        assert_ne!(
            home_of(&a, "orders").as_deref(),
            Some("b"),
            "the home moved"
        );
        assert!(refused_on_b > 0, "b refused what it could not journal");
        assert!(after_cut > 100, "the new home took enqueues during the cut");
    });
}

/// Failover turned on for a cluster whose queues already hold messages:
/// the home's first takeover starts the journal from its store (nothing
/// is lost), and after the home stops another member serves them all.
#[test]
fn turning_failover_on_keeps_what_the_queues_held() {
    let nats = Nats::start();
    let data = tempfile::tempdir().expect("b's store");
    let before = TestBroker::start_in(data.path(), |_| {});
    block_on(async {
        let on_b = client(&before).await;
        for i in 0..10 {
            on_b.enqueue("orders", format!("kept{i}"))
                .await
                .expect("an enqueue before the cluster");
        }
    });
    before.stop().expect("b stops");
    let b = TestBroker::start_in(
        data.path(),
        failover_config("b", vec![nats.url()], LEASE_MS),
    );
    let a = TestBroker::start(failover_config("a", vec![nats.url()], LEASE_MS));
    let c = TestBroker::start(failover_config("c", vec![nats.url()], LEASE_MS));
    status(&a);
    block_on(async {
        // A call takes the queue's lease on b (its home), which starts
        // the journal from what b's store holds.
        let on_a = client(&a).await;
        on_a.enqueue("orders", "kept10")
            .await
            .expect("b serves orders");
    });
    b.stop().expect("b stops again");
    block_on(async {
        let on_c = client(&c).await;
        let mut consumer = consume_once_served(&on_c).await;
        let mut got = BTreeSet::new();
        while got.len() < 11 {
            let d = consumer
                .recv_timeout(LONG)
                .await
                .unwrap_or_else(|| panic!("only {got:?} after b stopped"));
            on_c.ack(consumer.id(), &[d.id]).await.expect("an ack");
            got.insert(String::from_utf8_lossy(&d.payload).into_owned());
        }
        let want: BTreeSet<String> = (0..11).map(|i| format!("kept{i}")).collect();
        assert_eq!(got, want);
    });
}
