//! A cluster node killed with `kill -9`: nodes a and b run in-process,
//! node c is the real `wharf` binary, killed with SIGKILL. The clients
//! that were on c reconnect to a survivor and carry on; what a survivor
//! publishes reaches the subscribers on the other survivors, every
//! message, in order, once; `GET /admin/cluster` on a lists c as lost.

use crate::common;

use std::time::{Duration, Instant};

use common::{ChildBroker, LONG, TestBroker, block_on};
use wharf::client::{Client, ClientOptions, Subscription};

use crate::cluster::{Nats, client, node, status, until_heard};

/// Numbered messages a publishes after c is gone.
const N: usize = 200;

/// Node `name` as a `wharf serve` child process joined to `nats`, with
/// its config file and store in `dir`; the child and its address.
fn child_node(dir: &std::path::Path, nats: &str, name: &str) -> (ChildBroker, String) {
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!("[cluster]\nnats = [\"{nats}\"]\nnode = \"{name}\"\nconnect_timeout_ms = 2000\n"),
    )
    .expect("the child node's config file is written");
    let data = dir.join(format!("{name}-data"));
    let (config, data) = (
        config.to_str().expect("a UTF-8 config path"),
        data.to_str().expect("a UTF-8 data path"),
    );
    let child = ChildBroker::spawn(&[
        "serve",
        "--config",
        config,
        "--bind",
        "127.0.0.1:0",
        "--data-dir",
        data,
    ]);
    let url = format!("ws://{}/ws", child.address());
    (child, url)
}

/// `name`'s entry in `b`'s `GET /admin/cluster` peers, if listed.
fn peer(b: &TestBroker, name: &str) -> Option<serde_json::Value> {
    status(b)["peers"]
        .as_array()?
        .iter()
        .find(|p| p["node"] == name)
        .cloned()
}

/// Checks `cond` every 100 ms until it holds or `timeout` passes (status
/// over HTTP: not every 2 ms for the ten seconds a peer takes to be lost).
async fn poll(timeout: Duration, cond: impl FnMut() -> bool) -> bool {
    common::eventually_every(Duration::from_millis(100), timeout, cond).await
}

/// The payloads `sub` receives on `topic` until `end` arrives there (other
/// topics, such as earlier probes, are skipped); panics if `end` does not
/// come within `LONG` of the last message.
async fn until_end(sub: &mut Subscription, topic: &str, end: &str) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let m = sub
            .recv_timeout(LONG)
            .await
            .unwrap_or_else(|| panic!("{end:?} on {topic} did not arrive; had {got:?}"));
        if m.topic != topic {
            continue;
        }
        let payload = String::from_utf8_lossy(&m.payload).into_owned();
        if payload == end {
            return got;
        }
        got.push(payload);
    }
}

#[test]
fn a_node_killed_with_kill_9_its_clients_move_and_the_survivors_lose_nothing() {
    let started = Instant::now();
    let nats = Nats::start();
    let (a, b) = (node(&nats.url(), "a"), node(&nats.url(), "b"));
    let dir = tempfile::tempdir().expect("a temporary directory for node c");
    let (mut c, c_url) = child_node(dir.path(), &nats.url(), "c");
    block_on(async {
        let (ca, cb) = (client(&a).await, client(&b).await);
        let roamer = ClientOptions {
            client_id: Some("roamer".into()),
            ..ClientOptions::default()
        };
        let on_c = Client::connect(&c_url, roamer.clone())
            .await
            .expect("a client connects to node c");
        let mut b_sub = cb.subscribe("k/#").await.expect("b subscribes to k/#");
        let mut c_sub = on_c.subscribe("k/#").await.expect("c subscribes to k/#");
        // The three nodes hear each other before c goes.
        assert!(
            until_heard(&ca, "k/probe", &mut b_sub).await,
            "a publish on a reaches b"
        );
        assert!(
            until_heard(&ca, "k/probe", &mut c_sub).await,
            "a publish on a reaches c"
        );
        assert!(
            until_heard(&on_c, "k/probe", &mut b_sub).await,
            "a publish on c reaches b"
        );
        assert!(
            poll(LONG, || peer(&a, "c").is_some_and(|p| p["up"] == true)).await,
            "a lists c as up: {}",
            status(&a)
        );

        c.child.kill().expect("SIGKILL node c");
        let exit = c.wait_exit(LONG);
        assert!(!exit.success(), "c was killed: {exit}");
        let killed = Instant::now();

        // a publishes N numbered messages at once; b gets each, in order,
        // once (the end marker follows them on the same topic).
        for i in 0..N {
            ca.publish_confirmed("k/seq", format!("{i}").into_bytes())
                .await
                .unwrap_or_else(|e| panic!("a takes message {i} with c gone: {e}"));
        }
        ca.publish_confirmed("k/seq", b"end".to_vec())
            .await
            .expect("a takes the end marker");
        let want: Vec<String> = (0..N).map(|i| i.to_string()).collect();
        assert_eq!(
            until_end(&mut b_sub, "k/seq", "end").await,
            want,
            "b's k/# after c was killed"
        );

        // c's client is told its connection is gone (what was still on
        // its way before the kill, probes, may come first).
        let deadline = Instant::now() + LONG;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match actix_rt::time::timeout(left, c_sub.recv()).await {
                Ok(Some(_)) => continue,
                Ok(None) => break,
                Err(_) => panic!("the client on c was not told c is gone"),
            }
        }
        drop(on_c);
        // It reconnects to a, under the same client id, subscribes, and
        // hears b: the subscribe returns once NATS has a's interest, so
        // one publish is enough.
        let moved = Client::connect(&a.ws_url(), roamer)
            .await
            .expect("the client that was on c connects to a");
        let mut moved_sub = moved
            .subscribe("back/+")
            .await
            .expect("the moved client subscribes on a");
        cb.publish_confirmed("back/1", b"welcome".to_vec())
            .await
            .expect("b takes the publish");
        let m = moved_sub
            .recv_timeout(LONG)
            .await
            .expect("the moved client hears a publish on b");
        assert_eq!(
            (m.topic.as_str(), &m.payload[..]),
            ("back/1", &b"welcome"[..])
        );
        // And what it publishes reaches b.
        moved
            .publish_confirmed("k/seq", b"from the moved client".to_vec())
            .await
            .expect("a takes the moved client's publish");
        moved
            .publish_confirmed("k/seq", b"end".to_vec())
            .await
            .expect("a takes the second end marker");
        assert_eq!(
            until_end(&mut b_sub, "k/seq", "end").await,
            ["from the moved client"],
            "b hears the moved client"
        );

        // a lists c as lost once it has not heard it for ten seconds (it
        // forgets a lost node only after ten minutes); the link to NATS
        // and b are fine.
        assert!(
            poll(Duration::from_secs(30), || peer(&a, "c")
                .is_some_and(|p| p["up"] == false))
            .await,
            "a lists c as lost: {}",
            status(&a)
        );
        eprintln!("c lost on a {:?} after the kill", killed.elapsed());
        let sa = status(&a);
        assert_eq!(sa["state"], "connected", "{sa}");
        assert_eq!(
            peer(&a, "b").map(|p| p["up"].clone()),
            Some(serde_json::Value::Bool(true)),
            "{sa}"
        );
        assert_eq!(sa["dropped"], 0, "{sa}");
        assert_eq!(sa["failed"], 0, "{sa}");
        let sb = status(&b);
        assert_eq!(sb["state"], "connected", "{sb}");
        assert_eq!(sb["lost"], 0, "{sb}");
        assert_eq!(sb["refused"], 0, "{sb}");
    });
    for n in [a, b] {
        n.stop().expect("a survivor stops cleanly");
    }
    eprintln!("took {:?}", started.elapsed());
}
