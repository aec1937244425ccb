//! Nodes joined through a real `nats-server` (Debian's package, which
//! .ci/run and scripts/test install): topics published on one node reach
//! subscribers on the others once each, in order, with wildcards and
//! MQTT QoS 1; NATS restarted under the nodes; a NATS that is not there
//! at start; `GET /admin/cluster`.

use crate::common;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::raw_mqtt::{self, Raw};
use common::{LONG, TestBroker, block_on, eventually, http};
use wharf::client::{Client, ClientOptions, Subscription};
use wharf::protocol::mqtt::{Packet, PublishPacket};

/// A `nats-server` with JetStream on a loopback port, killed on drop.
pub(crate) struct Nats {
    port: u16,
    child: Option<Child>,
    store: tempfile::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Nats {
    pub(crate) fn start() -> Nats {
        let mut n = Nats {
            port: free_port(),
            child: None,
            store: tempfile::tempdir().unwrap(),
        };
        n.restart();
        n
    }

    pub(crate) fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and waits until it accepts.
    pub(crate) fn restart(&mut self) {
        self.start_with(&[]);
    }

    /// Starts on its port with `extra` arguments and waits until it
    /// accepts.
    fn start_with(&mut self, extra: &[String]) {
        self.kill();
        // Debian installs it in /usr/sbin, not on every user's PATH.
        let program = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("nats-server");
        let child = Command::new(program)
            .args([
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-js",
                "-sd",
            ])
            .arg(self.store.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect(
                "nats-server is not installed: apt-get install nats-server (./scripts/test does)",
            );
        self.child = Some(child);
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + LONG;
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Nats {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three `nats-server`s with JetStream routed into one NATS cluster (as
/// three machines would run them), each killed on drop.
pub(crate) struct NatsCluster {
    pub(crate) servers: Vec<Nats>,
}

impl NatsCluster {
    /// Starts the three and waits until JetStream has a metadata leader
    /// (replicated streams can be made from then on).
    pub(crate) fn start() -> NatsCluster {
        let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
        let mut servers = Vec::new();
        for (i, (port, route)) in ports.iter().enumerate() {
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, r))| format!("nats://127.0.0.1:{r}"))
                .collect();
            let mut n = Nats {
                port: *port,
                child: None,
                store: tempfile::tempdir().unwrap(),
            };
            let log = n.store.path().join("log");
            n.start_with(&[
                "-n".into(),
                format!("s{i}"),
                "--cluster_name".into(),
                "wharf".into(),
                "--cluster".into(),
                format!("nats://127.0.0.1:{route}"),
                "--routes".into(),
                routes.join(","),
                "-l".into(),
                log.to_str().unwrap().to_owned(),
            ]);
            servers.push(n);
        }
        let deadline = Instant::now() + LONG;
        for n in &servers {
            let log = n.store.path().join("log");
            while !std::fs::read_to_string(&log).is_ok_and(|l| l.contains("metadata leader")) {
                assert!(
                    Instant::now() < deadline,
                    "no JetStream leader in the NATS cluster"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        NatsCluster { servers }
    }

    /// The last lines of each server's log (for a failure's message).
    pub(crate) fn logs(&self) -> String {
        let mut out = String::new();
        for (i, n) in self.servers.iter().enumerate() {
            let log = std::fs::read_to_string(n.store.path().join("log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            out.push_str(&format!("--- nats s{i}\n"));
            for l in &lines[lines.len().saturating_sub(40)..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The servers' URLs, server `first`'s first.
    pub(crate) fn urls(&self, first: usize) -> Vec<String> {
        let mut urls: Vec<String> = self.servers.iter().map(Nats::url).collect();
        urls.rotate_left(first);
        urls
    }
}

pub(crate) fn node(nats: &str, name: &str) -> TestBroker {
    let (nats, name) = (nats.to_owned(), name.to_owned());
    TestBroker::start(move |c| {
        c.cluster.nats = vec![nats];
        c.cluster.node = name;
        c.cluster.connect_timeout_ms = 2_000;
    })
}

fn tcp_node(nats: &str, name: &str) -> TestBroker {
    let (nats, name) = (nats.to_owned(), name.to_owned());
    TestBroker::start_tcp(move |c| {
        c.cluster.nats = vec![nats];
        c.cluster.node = name;
        c.cluster.connect_timeout_ms = 2_000;
    })
}

pub(crate) fn status(b: &TestBroker) -> serde_json::Value {
    let (code, body) = http(b.addr, "GET", "/admin/cluster", "");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

pub(crate) async fn client(b: &TestBroker) -> Client {
    Client::connect(&b.ws_url(), ClientOptions::default())
        .await
        .unwrap()
}

/// The payloads `sub` receives until `quiet` passes with nothing more.
pub(crate) async fn drain(sub: &mut Subscription, quiet: Duration) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(m) = sub.recv_timeout(quiet).await {
        got.push(String::from_utf8_lossy(&m.payload).into_owned());
    }
    got
}

#[test]
fn a_publish_on_any_node_reaches_every_matching_subscription_once_in_order() {
    let nats = Nats::start();
    let (a, b, c) = (
        node(&nats.url(), "a"),
        node(&nats.url(), "b"),
        node(&nats.url(), "c"),
    );
    block_on(async {
        let (ca, cb, cc) = (client(&a).await, client(&b).await, client(&c).await);
        // Overlapping filters on one node: each subscription gets its
        // copy, the node hears the message once.
        let mut a_plus = ca.subscribe("sensors/+/temp").await.unwrap();
        let mut a_hash = ca.subscribe("sensors/#").await.unwrap();
        let mut b_exact = cb.subscribe("sensors/kitchen/temp").await.unwrap();
        let mut b_other = cb.subscribe("sensors/hall/temp").await.unwrap();
        let mut c_all = cc.subscribe("#").await.unwrap();
        let escaped = "sensors/kitchen/temp";
        for i in 0..200 {
            cc.publish(escaped, format!("{i}")).await.unwrap();
        }
        // A name NATS reserves characters of, published on b.
        cb.publish("sensors/a.b */temp", "odd").await.unwrap();
        let want: Vec<String> = (0..200).map(|i| i.to_string()).collect();
        let quiet = Duration::from_millis(700);
        let mut a_plus_got = drain(&mut a_plus, quiet).await;
        let mut a_hash_got = drain(&mut a_hash, quiet).await;
        let b_got = drain(&mut b_exact, quiet).await;
        let mut c_got = drain(&mut c_all, quiet).await;
        for (name, got) in [
            ("a sensors/+/temp", &mut a_plus_got),
            ("a sensors/#", &mut a_hash_got),
            ("c #", &mut c_got),
        ] {
            // Another publisher, another topic: no order between them.
            let odd = got.iter().position(|m| m == "odd");
            assert!(odd.is_some(), "{name} heard the odd name");
            got.remove(odd.unwrap_or_default());
            assert_eq!(*got, want, "{name}");
        }
        assert_eq!(b_got, want, "b's exact subscription");
        assert!(b_other.try_recv().is_none());
        // No copy came back to the publishing node, nor twice to a.
        let sa = status(&a);
        assert_eq!(sa["received"], 201, "{sa}");
        assert!(sa["duplicates"].as_u64().unwrap() >= 201, "{sa}");
        let sc = status(&c);
        assert_eq!(sc["received"], 1, "{sc}");
        assert_eq!(sc["forwarded"], 200, "{sc}");
        assert_eq!(sc["dropped"], 0, "{sc}");
    });
    for n in [a, b, c] {
        n.stop().unwrap();
    }
}

#[test]
fn mqtt_qos1_and_native_clients_on_different_nodes() {
    let nats = Nats::start();
    let (a, b) = (tcp_node(&nats.url(), "a"), tcp_node(&nats.url(), "b"));
    let (mut sub, code) = Raw::connect(a.mqtt_addr.unwrap(), raw_mqtt::hello_at(4, "sub-on-a"));
    assert_eq!(code, 0);
    sub.send(&Packet::subscribe(1, vec![("m/+/x".into(), 1)]));
    assert!(matches!(sub.recv(), Some(Packet::SubAck(_))));
    let (mut publisher, code) =
        Raw::connect(b.mqtt_addr.unwrap(), raw_mqtt::hello_at(4, "pub-on-b"));
    assert_eq!(code, 0);
    for i in 0..20u16 {
        publisher.send(&Packet::Publish(PublishPacket {
            dup: false,
            qos: 1,
            retain: false,
            topic: "m/k/x".into(),
            pid: Some(i + 1),
            payload: format!("q{i}").into_bytes().into(),
            props: Default::default(),
        }));
    }
    let mut got = Vec::new();
    while got.len() < 20 {
        match sub.recv() {
            Some(Packet::Publish(p)) => {
                assert_eq!(p.qos, 1, "QoS 1 end to end");
                sub.send(&Packet::puback(p.pid.unwrap()));
                got.push(String::from_utf8_lossy(&p.payload).into_owned());
            }
            other => panic!("expected a publish, got {other:?}"),
        }
    }
    assert_eq!(got, (0..20).map(|i| format!("q{i}")).collect::<Vec<_>>());
    // And a native subscriber on b hears an MQTT publish from a.
    block_on(async {
        let cb = client(&b).await;
        let mut s = cb.subscribe("from/mqtt").await.unwrap();
        let (mut p, _) = Raw::connect(a.mqtt_addr.unwrap(), raw_mqtt::hello_at(4, "p2"));
        p.send(&Packet::Publish(PublishPacket {
            dup: false,
            qos: 0,
            retain: false,
            topic: "from/mqtt".into(),
            pid: None,
            payload: b"hi".to_vec().into(),
            props: Default::default(),
        }));
        let m = s.recv_timeout(LONG).await.expect("the MQTT publish on a");
        assert_eq!(&m.payload[..], b"hi");
    });
}

/// Publishes on `from` until `sub` hears one (a reconnecting node may
/// miss the first): core NATS keeps nothing for a node that is away.
pub(crate) async fn until_heard(from: &Client, topic: &str, sub: &mut Subscription) -> bool {
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        from.publish(topic, "probe").await.unwrap();
        if sub.recv_timeout(Duration::from_millis(200)).await.is_some() {
            return true;
        }
    }
    false
}

#[test]
fn nodes_carry_on_alone_while_nats_is_away_and_rejoin_when_it_returns() {
    let mut nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    block_on(async {
        let (ca, cb) = (client(&a).await, client(&b).await);
        let mut on_a = ca.subscribe("r/#").await.unwrap();
        let mut on_b = cb.subscribe("r/#").await.unwrap();
        assert!(
            until_heard(&ca, "r/1", &mut on_b).await,
            "before the restart"
        );
        drain(&mut on_a, Duration::from_millis(100)).await;
        drain(&mut on_b, Duration::from_millis(100)).await;
        nats.kill();
        assert!(
            eventually(LONG, || status(&a)["state"] != "connected").await,
            "a notices NATS is gone"
        );
        // Local delivery carries on.
        ca.publish("r/local", "still here").await.unwrap();
        let m = on_a.recv_timeout(LONG).await.expect("local delivery");
        assert_eq!(&m.payload[..], b"still here");
        nats.restart();
        for n in [&a, &b] {
            assert!(
                eventually(LONG, || status(n)["state"] == "connected").await,
                "reconnected: {}",
                status(n)
            );
        }
        assert!(
            until_heard(&ca, "r/2", &mut on_b).await,
            "after the restart"
        );
        assert!(status(&a)["connects"].as_u64().unwrap() >= 2);
    });
}

#[test]
fn a_missing_nats_stops_the_start_unless_the_cluster_is_optional() {
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    let refused = node(&url, "a").stop().expect_err("no NATS, required");
    let text = refused.to_string();
    assert!(text.contains("cannot reach NATS"), "{text}");
    assert!(text.contains("cluster.required"), "{text}");

    let optional = {
        let url = url.clone();
        TestBroker::start(move |c| {
            c.cluster.nats = vec![url];
            c.cluster.node = "lonely".into();
            c.cluster.required = false;
        })
    };
    let s = status(&optional);
    assert_eq!(s["enabled"], true);
    assert_ne!(s["state"], "connected", "{s}");
    block_on(async {
        let c = client(&optional).await;
        let mut sub = c.subscribe("x").await.unwrap();
        c.publish("x", "alone").await.unwrap();
        assert!(sub.recv_timeout(LONG).await.is_some(), "local delivery");
        // NATS arrives: the node joins and hears the others.
        let mut nats = Nats {
            port,
            child: None,
            store: tempfile::tempdir().unwrap(),
        };
        nats.restart();
        assert!(
            eventually(LONG, || status(&optional)["state"] == "connected").await,
            "{}",
            status(&optional)
        );
        let other = node(&url, "other");
        let co = client(&other).await;
        assert!(until_heard(&co, "x", &mut sub).await);
        drop(co);
        other.stop().unwrap();
    });
}

#[test]
fn admin_cluster_shows_nodes_link_and_counts() {
    let single = TestBroker::start(|_| {});
    let s = status(&single);
    assert_eq!(s["enabled"], false, "{s}");
    assert_eq!(s["state"], "off", "{s}");

    let nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    assert!(
        common::wait_until(LONG, || {
            status(&a)["peers"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["node"] == "b" && p["up"] == true))
        }),
        "a hears b: {}",
        status(&a)
    );
    block_on(async {
        let cb = client(&b).await;
        let _sub = cb.subscribe("admin/+/x").await.unwrap();
        let s = status(&b);
        assert_eq!(s["node"], "b");
        assert_eq!(s["state"], "connected");
        assert_eq!(s["filters"], serde_json::json!(["admin/+/x"]), "{s}");
        assert_eq!(
            s["subjects"],
            serde_json::json!(["wharf.t.admin.*.x"]),
            "{s}"
        );
    });
}

#[test]
fn filters_nobody_uses_any_more_stop_being_heard() {
    let nats = Nats::start();
    let b = node(&nats.url(), "b");
    block_on(async {
        let keep = client(&b).await;
        let _kept = keep.subscribe("kept/+").await.unwrap();
        let gone = client(&b).await;
        let _sub = gone.subscribe("gone/+").await.unwrap();
        let filters = || status(&b)["filters"].clone();
        assert_eq!(filters(), serde_json::json!(["kept/+", "gone/+"]));
        drop(_sub);
        drop(gone);
        // The reconciler runs every 10 s, and releases a filter at the
        // earliest 14 s (10 s + twice connect_timeout_ms) after its want.
        assert!(
            eventually(Duration::from_secs(45), || filters()
                == serde_json::json!(["kept/+"]))
            .await,
            "{}",
            status(&b)
        );
    });
}

#[test]
fn retained_messages_are_shared_through_jetstream() {
    let nats = Nats::start();
    let (a, b, c) = (
        node(&nats.url(), "a"),
        node(&nats.url(), "b"),
        node(&nats.url(), "c"),
    );
    block_on(async {
        let (ca, cb, cc) = (client(&a).await, client(&b).await, client(&c).await);
        // Each node writes retained messages to the bucket once it has
        // found it (before that they stay on the node).
        for n in [&a, &b, &c] {
            assert!(
                eventually(LONG, || status(n)["retained_shared"] == true).await,
                "{}",
                status(n)
            );
        }
        // Nobody subscribes anywhere yet.
        ca.publish_retained("state/door", "open").await.unwrap();
        assert!(
            eventually(LONG, || status(&a)["forwarded"] == 2).await,
            "the message and its bucket write: {}",
            status(&a)
        );
        // A node that never heard it has it for its first subscriber.
        // (JetStream stores the write a moment after NATS has it: each
        // try is a filter b has not heard yet, which reads the bucket.)
        let mut heard = None;
        for f in ["state/+", "+/door", "state/door/#", "+/+", "#"] {
            let mut s = cb.subscribe(f).await.unwrap();
            if let Some(m) = s.recv_timeout(Duration::from_millis(500)).await {
                heard = Some(m);
                break;
            }
        }
        let m = heard.expect("b delivers the retained message published on a");
        assert_eq!(
            (m.topic.as_str(), &m.payload[..]),
            ("state/door", &b"open"[..])
        );
        assert!(m.retained, "delivered as retained");

        // Cleared on c, changed on c: a, which still holds its own
        // "open", reads the bucket when its first subscriber comes.
        cc.publish_retained("state/door", "").await.unwrap();
        cc.publish_retained("state/window", "closed").await.unwrap();
        assert!(
            eventually(LONG, || status(&c)["forwarded"] == 4).await,
            "{}",
            status(&c)
        );
        let mut s = ca.subscribe("state/#").await.unwrap();
        let mut got = Vec::new();
        while let Some(m) = s.recv_timeout(Duration::from_millis(700)).await {
            got.push((
                m.topic.clone(),
                String::from_utf8_lossy(&m.payload).into_owned(),
            ));
        }
        assert_eq!(got, [("state/window".to_owned(), "closed".to_owned())]);
    });
}

#[test]
fn an_mqtt_client_that_connects_on_another_node_takes_its_session_over() {
    let nats = Nats::start();
    let (a, b) = (tcp_node(&nats.url(), "a"), tcp_node(&nats.url(), "b"));
    // MQTT 5, so the old connection is told why.
    let (mut old, code) = Raw::connect(a.mqtt_addr.unwrap(), raw_mqtt::hello_at(5, "dev-1"));
    assert_eq!(code, 0);
    let (mut other, code) = Raw::connect(a.mqtt_addr.unwrap(), raw_mqtt::hello_at(5, "dev-2"));
    assert_eq!(code, 0);
    let (mut new, code) = Raw::connect(b.mqtt_addr.unwrap(), raw_mqtt::hello_at(5, "dev-1"));
    assert_eq!(code, 0);
    match old.recv() {
        Some(Packet::Disconnect(d)) => {
            assert_eq!(d.reason, 0x8E, "session taken over: {d:?}")
        }
        other => panic!("expected DISCONNECT, got {other:?}"),
    }
    assert!(old.recv().is_none(), "then closed");
    // Only that client: another on a, and the new one on b, carry on.
    assert!(other.until_pong().is_empty());
    assert!(new.until_pong().is_empty());
}

/// The members of the clusters whose queues and jobs have homes.
pub(crate) const MEMBERS: [&str; 3] = ["a", "b", "c"];

/// Makes `c` node `name` of a cluster on `nats` with [`MEMBERS`].
pub(crate) fn as_member(c: &mut wharf::Config, nats: String, name: String) {
    c.cluster.nats = vec![nats];
    c.cluster.node = name;
    c.cluster.connect_timeout_ms = 2_000;
    c.cluster.members = MEMBERS.iter().map(|m| (*m).to_owned()).collect();
}

/// A node of a cluster whose queues and jobs have homes: `orders` lives
/// on `b`, everything else by rendezvous over a, b and c.
fn homing_node(nats: &str, name: &str) -> TestBroker {
    let (nats, name) = (nats.to_owned(), name.to_owned());
    let node = TestBroker::start(move |c| {
        as_member(c, nats, name);
        c.queues.push(wharf::config::QueueDecl {
            name: "orders".into(),
            home: Some("b".into()),
            ack_timeout_ms: Some(60_000),
            ..Default::default()
        });
    });
    // Answering HTTP means started: its queues take calls from the others.
    status(&node);
    node
}

fn queue_depth(b: &TestBroker, queue: &str) -> Option<u64> {
    let (code, body) = http(b.addr, "GET", &format!("/queues/{queue}"), "");
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&body).ok()?;
    v["depth"].as_u64()
}

#[test]
fn an_enqueue_repeated_with_its_message_id_on_other_nodes_is_stored_once_at_the_home() {
    let nats = Nats::start();
    let a = homing_node(&nats.url(), "a");
    let b = homing_node(&nats.url(), "b");
    let c = homing_node(&nats.url(), "c");
    block_on(async {
        let once = || wharf::client::EnqueueOptions::default().msg_id("order-1");
        let on_a = client(&a).await;
        let first = on_a
            .enqueue_with("orders", b"o".to_vec(), once())
            .await
            .unwrap();
        // The retry arrives through another node: the home decides.
        let on_c = client(&c).await;
        let again = on_c
            .enqueue_with("orders", b"o".to_vec(), once())
            .await
            .unwrap();
        assert_eq!(again, first);
    });
    assert_eq!(queue_depth(&b, "orders"), Some(1));
}

#[test]
fn a_queue_homed_on_b_is_fed_on_a_and_consumed_on_c() {
    let nats = Nats::start();
    let a = homing_node(&nats.url(), "a");
    let b = homing_node(&nats.url(), "b");
    let c = homing_node(&nats.url(), "c");
    block_on(async {
        let on_a = client(&a).await;
        // Thirty in flight at once: the home takes them in order.
        let mut pending = Vec::new();
        for i in 0..30 {
            let opts = wharf::client::EnqueueOptions::default();
            let p = on_a.enqueue_pipelined("orders", format!("o{i}").into_bytes(), opts);
            pending.push(p.await.expect("an enqueue on a, homed on b"));
        }
        let mut seqs = Vec::new();
        for p in pending {
            seqs.push(p.await.expect("confirmed by b"));
        }
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "in order on b: {seqs:?}"
        );
        // Held by b, the home; asked on a, b answers.
        assert_eq!(queue_depth(&b, "orders"), Some(30));
        assert_eq!(queue_depth(&a, "orders"), Some(30));
        let (_, listed) = http(a.addr, "GET", "/queues", "");
        assert!(
            !listed.contains("\"orders\""),
            "a holds no queue of its own: {listed}"
        );
        let on_c = client(&c).await;
        let mut consumer = on_c.consume("orders", 10).await.expect("a consumer on c");
        assert!(
            eventually(LONG, || status(&b)["remote_consumers"] == 1).await,
            "b lists c's consumer: {}",
            status(&b)
        );
        let mut got = Vec::new();
        let mut nacked = false;
        while got.len() < 30 {
            let d = consumer
                .recv_timeout(LONG)
                .await
                .expect("a delivery from b on c");
            assert_eq!(d.queue, "orders");
            let text = String::from_utf8_lossy(&d.payload).into_owned();
            if text == "o5" && !nacked {
                // Given back: it comes again, counted twice.
                on_c.nack(consumer.id(), &[d.id], Some(0))
                    .await
                    .expect("a nack through c");
                nacked = true;
                continue;
            }
            if text == "o5" {
                assert_eq!(d.count, 2, "the redelivery of a nacked message");
            }
            on_c.ack(consumer.id(), &[d.id])
                .await
                .expect("an ack through c");
            got.push(text);
        }
        // In the order a enqueued them (o5 again once nacked).
        let mut want: Vec<String> = (0..30)
            .filter(|i| *i != 5)
            .map(|i| format!("o{i}"))
            .collect();
        let at = got.iter().position(|m| m == "o5").expect("o5 redelivered");
        want.insert(at, "o5".into());
        assert_eq!(got, want, "every message once, in order");
        assert!(
            eventually(LONG, || queue_depth(&b, "orders") == Some(0)).await,
            "the acks reached b"
        );
        // A delivery left unsettled when its consumer's connection ends
        // goes back to the queue on b, and a consumer on a gets it.
        on_a.enqueue("orders", "last").await.unwrap();
        let d = consumer
            .recv_timeout(LONG)
            .await
            .expect("the last one on c");
        assert_eq!(&d.payload[..], b"last");
        drop(consumer);
        on_c.close(false).await.unwrap();
        assert!(
            eventually(LONG, || status(&b)["remote_consumers"] == 0).await,
            "c's consumer is gone from b: {}",
            status(&b)
        );
        let mut again = on_a.consume("orders", 1).await.expect("a consumer on a");
        let d = again
            .recv_timeout(LONG)
            .await
            .expect("the unsettled one, again");
        assert_eq!((&d.payload[..], d.count), (&b"last"[..], 2));
        on_a.ack(again.id(), &[d.id]).await.unwrap();
        // A settle naming a consumer that does not exist is refused as on
        // one node.
        let err = on_a
            .ack("nobody", &[1])
            .await
            .expect_err("an unknown consumer");
        assert!(err.to_string().contains("consumer"), "{err}");
        // An operator deletes it from any node.
        on_a.enqueue("orders", "doomed").await.unwrap();
        drop(again);
        on_a.close(false).await.unwrap();
        let (code, body) = http(c.addr, "DELETE", "/queues/orders", "");
        assert!((200..300).contains(&code), "{code} {body}");
        assert!(
            eventually(LONG, || queue_depth(&b, "orders").is_none()).await,
            "deleted on b"
        );
    });
}

#[test]
fn a_job_enqueued_on_one_node_is_worked_on_another() {
    let nats = Nats::start();
    let members: Vec<String> = MEMBERS.iter().map(|m| (*m).to_owned()).collect();
    let home = wharf::cluster::home::rendezvous(&members, "jobs")
        .unwrap()
        .to_owned();
    let others: Vec<&str> = MEMBERS.iter().copied().filter(|m| *m != home).collect();
    let nodes: Vec<TestBroker> = MEMBERS
        .iter()
        .map(|m| homing_node(&nats.url(), m))
        .collect();
    let at = |name: &str| &nodes[MEMBERS.iter().position(|m| *m == name).unwrap()];
    let (enqueuer, worker_node) = (at(others[0]), at(others[1]));
    let post = |b: &TestBroker, path: &str, body: serde_json::Value| {
        let (code, text) = http(b.addr, "POST", path, &body.to_string());
        (
            code,
            serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default(),
        )
    };
    let (code, job) = post(
        enqueuer,
        "/jobs",
        serde_json::json!({
            "kind": "resize",
            "entity_id": "0190a6f0-0000-7000-8000-000000000001",
            "data": {"n": 1},
        }),
    );
    assert_eq!(code, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_owned();
    let (code, w) = post(
        worker_node,
        "/workers",
        serde_json::json!({"kinds": ["resize"]}),
    );
    assert_eq!(code, 201, "{w}");
    let worker = w["worker_id"].as_str().unwrap().to_owned();
    let (code, got) = post(
        worker_node,
        &format!("/workers/{worker}/dequeue?wait_ms=5000"),
        serde_json::json!({}),
    );
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["id"], id.as_str(), "the job enqueued on another node");
    let token = got["attempt"]
        .as_u64()
        .or(got["token"].as_u64())
        .unwrap_or(1);
    let (code, done) = post(
        worker_node,
        &format!("/jobs/{id}/outcome"),
        serde_json::json!({"worker_id": worker, "token": token, "outcome": "succeeded"}),
    );
    assert_eq!(code, 200, "{done}");
    // Every node sees the same job.
    for n in &nodes {
        let (code, text) = http(n.addr, "GET", &format!("/jobs/{id}"), "");
        assert_eq!(code, 200, "{text}");
        assert!(text.contains("succeeded"), "{text}");
    }
    assert_eq!(status(enqueuer)["jobs_home"], home.as_str());
    // A job call refused at the home is refused here the same way.
    let (code, text) = http(
        enqueuer.addr,
        "GET",
        "/jobs/0190a6f0-0000-7000-8000-0000000000ff",
        "",
    );
    assert_eq!(code, 404, "{text}");
}

#[test]
fn a_consumer_whose_home_restarts_is_attached_again() {
    let nats = Nats::start();
    let data = tempfile::tempdir().unwrap();
    let tune = |name: &'static str| {
        let url = nats.url();
        move |c: &mut wharf::Config| {
            as_member(c, url, name.into());
            c.queues.push(wharf::config::QueueDecl {
                name: "orders".into(),
                home: Some("b".into()),
                ..Default::default()
            });
        }
    };
    let a = TestBroker::start(tune("a"));
    let b = TestBroker::start_in(data.path(), tune("b"));
    let c = TestBroker::start(tune("c"));
    for n in [&a, &b, &c] {
        status(n);
    }
    block_on(async {
        let on_a = client(&a).await;
        let on_c = client(&c).await;
        let mut consumer = on_c.consume("orders", 10).await.expect("a consumer on c");
        on_a.enqueue("orders", "before").await.unwrap();
        let d = consumer
            .recv_timeout(LONG)
            .await
            .expect("before the restart");
        on_c.ack(consumer.id(), &[d.id]).await.unwrap();
        // b restarts and forgets its consumers on other nodes; c finds
        // out when it hears b's new process and attaches this one again.
        b.stop().expect("b stops");
        // Asked on a meanwhile: busy, not "no such queue".
        let (code, body) = http(a.addr, "GET", "/queues/orders", "");
        assert_eq!(code, 503, "{body}");
        assert!(body.contains("did not answer"), "{body}");
        let b = TestBroker::start_in(data.path(), tune("b"));
        // Until b serves again, a says its home did not answer, or (b's
        // link up, its store not yet restored) that b is starting.
        let deadline = Instant::now() + LONG;
        while let Err(e) = on_a.enqueue("orders", "after").await {
            let e = e.to_string();
            assert!(
                e.contains("did not answer") || e.contains("node \"b\" is starting"),
                "{e}"
            );
            assert!(Instant::now() < deadline, "b never came back: {e}");
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
        // c hears b's new process say hello and attaches again at once
        // (before, it waited for a check that skipped consumers younger
        // than 15 s: up to ~25 s).
        let back = Instant::now();
        let d = consumer
            .recv_timeout(Duration::from_secs(45))
            .await
            .expect("the consumer on c, attached again");
        assert_eq!(&d.payload[..], b"after");
        eprintln!("attached again {:?} after b served", back.elapsed());
        assert!(
            back.elapsed() < Duration::from_secs(3),
            "attached again only after {:?}",
            back.elapsed()
        );
        on_c.ack(consumer.id(), &[d.id])
            .await
            .expect("acked at the new b");
        assert!(
            eventually(LONG, || queue_depth(&b, "orders") == Some(0)).await,
            "{}",
            status(&b)
        );
        // Any node says where the queue lives.
        let (code, body) = http(a.addr, "GET", "/queues/orders", "");
        assert_eq!(code, 200, "{body}");
        assert!(body.contains(r#""home":"b""#), "{body}");
    });
}
