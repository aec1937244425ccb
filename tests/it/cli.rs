//! The `wharf` command line (pub, sub, queue, job, top, completions)
//! run as the real binary against a broker started by the test, on
//! loopback with an ephemeral port. Every wait is bounded.

use crate::common;

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestBroker, http, http_request, wait_until};
use serde_json::Value;

/// Longest any one command may take.
const DEADLINE: Duration = Duration::from_secs(30);

/// What a finished command left.
struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Done {
    fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

impl std::fmt::Debug for Done {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?}\n--- stdout\n{}--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// `wharf ARGS` against `b` (through WHARF_URL), not yet waited for.
fn spawn(b: &TestBroker, args: &[&str], stdin: Option<&[u8]>) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(args)
        .env("WHARF_URL", format!("http://{}", b.addr))
        .env_remove("WHARF_TOKEN")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start wharf");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input).expect("write stdin");
    }
    child
}

/// Waits (at most [`DEADLINE`]) for `child` to exit and collects its
/// output; kills it past the deadline.
fn finish(mut child: Child) -> Done {
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let done = Done {
        code: status.and_then(|s| s.code()),
        stdout: reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    assert!(
        status.is_some(),
        "wharf did not exit within {DEADLINE:?}: {done:?}"
    );
    done
}

/// Runs `wharf ARGS` to the end.
fn wharf(b: &TestBroker, args: &[&str]) -> Done {
    finish(spawn(b, args, None))
}

/// Runs `wharf ARGS` with `input` on standard input.
fn wharf_in(b: &TestBroker, args: &[&str], input: &[u8]) -> Done {
    finish(spawn(b, args, Some(input)))
}

fn get(b: &TestBroker, path: &str) -> Value {
    let (status, body) = http(b.addr, "GET", path, "");
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or(Value::Null)
}

/// Waits until `sub` has subscribed: the exact topic `exact` has a
/// subscriber and there are `wildcards` wildcard subscriptions.
fn wait_subscribed(b: &TestBroker, exact: &str, wildcards: u64) {
    let seen = wait_until(Duration::from_secs(20), || {
        let topics = get(b, &format!("/admin/topics?filter={exact}"));
        let subscribed = topics["topics"][0]["subscribers"].as_u64() == Some(1);
        let wild = get(b, "/admin/overview")["wildcard_subscriptions"].as_u64();
        subscribed && wild == Some(wildcards)
    });
    assert!(seen, "the subscriber did not subscribe within 20 s");
}

#[test]
fn pub_to_sub_round_trip_as_text_and_json() {
    let b = TestBroker::start(|_| {});
    let sub = spawn(
        &b,
        &[
            "sub",
            "cli/exact",
            "cli/wild/#",
            "--count",
            "3",
            "--timeout",
            "20",
        ],
        None,
    );
    wait_subscribed(&b, "cli/exact", 1);
    let p = wharf(&b, &["pub", "cli/exact", "hello world"]);
    assert!(p.ok(), "{p:?}");
    let p = wharf_in(
        &b,
        &["pub", "cli/wild/a", "--lines"],
        b"line one\r\nline two\n",
    );
    assert!(p.ok(), "{p:?}");
    let s = finish(sub);
    assert!(s.ok(), "{s:?}");
    assert_eq!(s.stdout, "hello world\nline one\nline two\n");

    // --json, headers, and a payload that is not UTF-8 (from stdin).
    let sub = spawn(
        &b,
        &["sub", "cli/exact", "cli/wild/#", "--json", "--count", "2"],
        None,
    );
    wait_subscribed(&b, "cli/exact", 1);
    let p = wharf(
        &b,
        &[
            "pub",
            "cli/exact",
            "--header",
            "k=v",
            "--header",
            "n=1",
            "hi",
        ],
    );
    assert!(p.ok(), "{p:?}");
    let p = wharf_in(&b, &["pub", "cli/wild/b", "-"], &[0xff, 0x00, 0x01]);
    assert!(p.ok(), "{p:?}");
    let s = finish(sub);
    assert!(s.ok(), "{s:?}");
    let lines: Vec<Value> = s
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{s:?}");
    assert_eq!(lines[0]["topic"], "cli/exact");
    assert_eq!(lines[0]["payload"], "hi");
    assert_eq!(lines[0]["headers"]["k"], "v");
    assert_eq!(lines[0]["headers"]["n"], "1");
    assert_eq!(lines[1]["topic"], "cli/wild/b");
    assert_eq!(lines[1]["payload_base64"], "/wAB");
    assert!(lines[1].get("payload").is_none());
}

#[test]
fn pub_count_retain_and_sub_timeouts() {
    let b = TestBroker::start(|_| {});
    let p = wharf(&b, &["pub", "cli/many", "x", "--count", "500"]);
    assert!(p.ok(), "{p:?}");
    assert!(p.stderr.is_empty(), "no bar without a terminal: {p:?}");
    let o = get(&b, "/admin/overview");
    assert!(o["published"].as_u64() >= Some(500), "{o}");

    // A retained message reaches a later subscriber.
    let p = wharf(&b, &["pub", "cli/kept", "last value", "--retain"]);
    assert!(p.ok(), "{p:?}");
    let s = wharf(&b, &["sub", "cli/kept", "--count", "1", "--timeout", "20"]);
    assert!(s.ok(), "{s:?}");
    assert_eq!(s.stdout, "last value\n");

    // Fewer than --count within --timeout: non-zero, and says so.
    let started = Instant::now();
    let s = wharf(
        &b,
        &["sub", "cli/silent", "--count", "1", "--timeout", "0.5"],
    );
    assert_eq!(s.code, Some(1), "{s:?}");
    assert!(s.stderr.contains("0 of 1"), "{s:?}");
    assert!(started.elapsed() < Duration::from_secs(15));
    // No --count: the timeout is the end, and a success.
    let s = wharf(&b, &["sub", "cli/silent", "--timeout", "0.2"]);
    assert!(s.ok(), "{s:?}");

    // Bad usage is 2; a refused publish is 1 with the broker's code.
    let p = wharf(&b, &["pub", "cli/x", "--header", "novalue", "m"]);
    assert_eq!(p.code, Some(2), "{p:?}");
    let p = wharf(&b, &["pub", "cli/#", "m"]);
    assert_eq!(p.code, Some(1), "{p:?}");
    assert!(p.stderr.starts_with("wharf: invalid_topic: "), "{p:?}");
}

#[test]
fn queue_enqueue_peek_purge_stat() {
    let b = TestBroker::start(|_| {});
    for m in ["first", "second", "third"] {
        let e = wharf(&b, &["queue", "enqueue", "cli.q", m, "--header", "k=v"]);
        assert!(e.ok(), "{e:?}");
        assert!(e.stdout.trim().parse::<u64>().is_ok(), "an id: {e:?}");
    }
    let ls = wharf(&b, &["queue", "ls"]);
    assert!(ls.ok(), "{ls:?}");
    let row = ls
        .stdout
        .lines()
        .find(|l| l.starts_with("cli.q "))
        .unwrap_or("");
    assert_eq!(row.split_whitespace().nth(1), Some("3"), "{ls:?}");
    let ls = wharf(&b, &["queue", "ls", "--json"]);
    let all: Value = serde_json::from_str(&ls.stdout).expect("JSON");
    assert!(
        all.as_array()
            .is_some_and(|a| a.iter().any(|q| q["name"] == "cli.q"))
    );

    let peek = wharf(&b, &["queue", "peek", "cli.q", "--limit", "2", "--json"]);
    assert!(peek.ok(), "{peek:?}");
    let page: Value = serde_json::from_str(&peek.stdout).expect("JSON");
    let messages = page["messages"].as_array().cloned().unwrap_or_default();
    assert_eq!(messages.len(), 2, "{page}");
    assert_eq!(messages[0]["payload"], "first");
    assert_eq!(messages[0]["headers"]["k"], "v");
    let peek = wharf(&b, &["queue", "peek", "cli.q"]);
    assert!(peek.ok(), "{peek:?}");
    assert!(peek.stdout.contains("third"), "{peek:?}");
    // Peeking consumed nothing.
    assert_eq!(get(&b, "/queues/cli.q")["depth"], 3);

    let purge = wharf(&b, &["queue", "purge", "cli.q", "--yes"]);
    assert!(purge.ok(), "{purge:?}");
    assert!(purge.stdout.contains("purged 3"), "{purge:?}");
    let stat = wharf(&b, &["queue", "stat", "cli.q"]);
    assert!(stat.ok(), "{stat:?}");
    let depth = stat.stdout.lines().find(|l| l.starts_with("depth:"));
    assert_eq!(
        depth.and_then(|l| l.split_whitespace().nth(1)),
        Some("0"),
        "{stat:?}"
    );

    // Move one message to another queue.
    let e = wharf(&b, &["queue", "enqueue", "cli.q", "stray"]);
    let id = e.stdout.trim().to_owned();
    let m = wharf(&b, &["queue", "move", "cli.q", &id, "--to", "cli.parked"]);
    assert!(m.ok(), "{m:?}");
    assert!(
        m.stdout
            .starts_with(&format!("moved cli.q #{id} to cli.parked #")),
        "{m:?}"
    );
    assert_eq!(get(&b, "/queues/cli.parked")["depth"], 1);
    assert_eq!(get(&b, "/queues/cli.q")["depth"], 0);
    let m = wharf(&b, &["queue", "move", "cli.q", &id, "--to", "cli.parked"]);
    assert_eq!(m.code, Some(1), "{m:?}");
    assert!(m.stderr.starts_with("wharf: unknown_message: "), "{m:?}");

    let redrive = wharf(&b, &["queue", "redrive", "cli.q.dlq"]);
    assert!(redrive.ok(), "{redrive:?}");
    assert!(redrive.stdout.contains("moved 0"), "{redrive:?}");

    // An unknown queue: exit 1, the broker's code on stderr.
    let stat = wharf(&b, &["queue", "stat", "no-such-queue"]);
    assert_eq!(stat.code, Some(1), "{stat:?}");
    assert!(
        stat.stderr.starts_with("wharf: unknown_queue: "),
        "{stat:?}"
    );
}

#[test]
fn job_enqueue_and_status() {
    let b = TestBroker::start(|_| {});
    let entity = "0190a6f0-0000-7000-8000-000000000042";
    let e = wharf(
        &b,
        &[
            "job",
            "enqueue",
            "cli-mail",
            r#"{"to":"ops"}"#,
            "--priority",
            "4",
            "--entity",
            entity,
        ],
    );
    assert!(e.ok(), "{e:?}");
    let id = e.stdout.trim().to_owned();
    let s = wharf(&b, &["job", "status", &id, "--json"]);
    assert!(s.ok(), "{s:?}");
    let view: Value = serde_json::from_str(&s.stdout).expect("JSON");
    assert_eq!(view["id"], id.as_str());
    assert_eq!(view["kind"], "cli-mail");
    assert_eq!(view["status"], "queued");
    assert_eq!(view["priority"], 4);
    assert_eq!(view["entity_id"], entity);
    assert_eq!(view["data"]["to"], "ops");
    let s = wharf(&b, &["job", "status", &id]);
    assert!(s.ok(), "{s:?}");
    assert!(
        s.stdout
            .lines()
            .any(|l| l.starts_with("status:") && l.ends_with("queued"))
    );

    // Data from stdin; data that is not JSON is bad usage.
    let e = wharf_in(&b, &["job", "enqueue", "cli-mail", "-"], b"[1, 2]");
    assert!(e.ok(), "{e:?}");
    let e = wharf(&b, &["job", "enqueue", "cli-mail", "{nope"]);
    assert_eq!(e.code, Some(2), "{e:?}");

    // List, cancel, retry.
    let ls = wharf(
        &b,
        &["job", "ls", "--kind", "cli-mail", "--status", "queued"],
    );
    assert!(ls.ok(), "{ls:?}");
    assert_eq!(
        ls.stdout.lines().count(),
        3,
        "a header and two jobs: {ls:?}"
    );
    assert!(
        ls.stdout.lines().nth(1).is_some_and(|l| l.starts_with(&id)),
        "{ls:?}"
    );
    let ls = wharf(&b, &["job", "ls", "--limit", "1", "--json"]);
    let page: Value = serde_json::from_str(&ls.stdout).expect("JSON");
    assert_eq!(page["jobs"].as_array().map(Vec::len), Some(1), "{page}");
    assert_eq!(page["next"], id.as_str());
    assert!(ls.stderr.is_empty(), "--json prints no hint: {ls:?}");
    let c = wharf(&b, &["job", "cancel", &id]);
    assert!(c.ok(), "{c:?}");
    assert_eq!(c.stdout.trim(), format!("{id} cancelled"));
    let c = wharf(&b, &["job", "cancel", &id]);
    assert_eq!(c.code, Some(1), "{c:?}");
    assert!(c.stderr.starts_with("wharf: conflict: "), "{c:?}");
    let r = wharf(&b, &["job", "retry", &id]);
    assert!(r.ok(), "{r:?}");
    assert_eq!(r.stdout.trim(), format!("{id} queued"));
    let ls = wharf(&b, &["job", "ls", "--status", "bogus"]);
    assert_eq!(ls.code, Some(1), "{ls:?}");

    let s = wharf(&b, &["job", "status", "not-an-id"]);
    assert_eq!(s.code, Some(1), "{s:?}");
    assert!(s.stderr.starts_with("wharf: "), "{s:?}");
}

#[test]
fn top_completions_and_connection_refused() {
    let b = TestBroker::start(|_| {});
    let t = wharf(&b, &["top", "--iterations", "1"]);
    assert!(t.ok(), "{t:?}");
    for want in ["sessions: ", "publish: ", "memory: ", "jobs: "] {
        assert!(t.stdout.contains(want), "{want}: {t:?}");
    }
    assert!(!t.stdout.contains('\x1b'), "no escapes into a pipe: {t:?}");

    let c = wharf(&b, &["completions", "bash"]);
    assert!(c.ok(), "{c:?}");
    assert!(
        c.stdout.contains("complete -F") && c.stdout.contains("wharf"),
        "{c:?}"
    );

    // Nothing listens on the port of a listener just closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let url = format!("http://127.0.0.1:{port}");
    let q = wharf(&b, &["queue", "ls", "--url", &url, "--timeout", "5"]);
    assert_eq!(q.code, Some(1), "{q:?}");
    assert!(
        q.stderr.contains(&format!("cannot connect to {url}")),
        "{q:?}"
    );
    let p = wharf(&b, &["pub", "t", "m", "--url", &url, "--timeout", "5"]);
    assert_eq!(p.code, Some(1), "{p:?}");
    assert!(
        p.stderr.contains("cannot connect to ws://127.0.0.1:"),
        "{p:?}"
    );
}

#[test]
fn a_token_is_sent_and_its_absence_explained() {
    use wharf::config::auth::{Permissions, TokenConfig};
    let b = TestBroker::start(|c| {
        c.auth.tokens.push(TokenConfig {
            name: "ops".into(),
            token_sha256: wharf::auth::token_digest("ops-token"),
            allow: Permissions::everything(),
        });
        // The refusals below must not lock the test out.
        c.auth.max_failures = 100;
    });
    // Without: 401 over HTTP, unauthorized over WebSocket, both naming
    // the way out.
    let q = wharf(&b, &["queue", "ls"]);
    assert_eq!(q.code, Some(1), "{q:?}");
    assert!(q.stderr.starts_with("wharf: unauthorized: "), "{q:?}");
    assert!(q.stderr.contains("--token"), "{q:?}");
    let p = wharf(&b, &["pub", "cli/t", "m"]);
    assert_eq!(p.code, Some(1), "{p:?}");
    assert!(p.stderr.starts_with("wharf: unauthorized: "), "{p:?}");
    assert!(p.stderr.contains("--token"), "{p:?}");

    // With: both work.
    let e = wharf(
        &b,
        &["queue", "enqueue", "cli.auth", "m", "--token", "ops-token"],
    );
    assert!(e.ok(), "{e:?}");
    let q = wharf(&b, &["queue", "stat", "cli.auth", "--token", "ops-token"]);
    assert!(q.ok(), "{q:?}");
    let p = wharf(&b, &["pub", "cli/t", "m", "--token", "ops-token"]);
    assert!(p.ok(), "{p:?}");
    // A wrong token is refused as such.
    let (status, _, _) = http_request(b.addr, "GET", "/queues", "Authorization: Bearer x\r\n", "");
    assert_eq!(status, 401);
    let q = wharf(&b, &["queue", "ls", "--token", "wrong"]);
    assert_eq!(q.code, Some(1), "{q:?}");
    assert!(q.stderr.starts_with("wharf: unauthorized: "), "{q:?}");
}

#[test]
fn https_and_wss_with_a_private_ca() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key) = common::make_certs(dir.path());
    let b = TestBroker::start(|c| {
        c.server.tls.cert = cert;
        c.server.tls.key = key;
    });
    let url = format!("https://localhost:{}", b.addr.port());
    let ca = ca.to_str().expect("a UTF-8 path");
    let e = wharf(
        &b,
        &[
            "queue", "enqueue", "cli.tls", "m", "--url", &url, "--ca", ca,
        ],
    );
    assert!(e.ok(), "{e:?}");
    let p = wharf(&b, &["pub", "cli/tls", "m", "--url", &url, "--ca", ca]);
    assert!(p.ok(), "{p:?}");
    // Without the CA the public roots do not vouch for it.
    let q = wharf(&b, &["queue", "ls", "--url", &url]);
    assert_eq!(q.code, Some(1), "{q:?}");
    assert!(
        q.stderr.contains(&format!("cannot connect to {url}")),
        "{q:?}"
    );
}

#[test]
fn queue_enqueue_with_a_message_id_is_stored_once() {
    let b = TestBroker::start(|_| {});
    let first = wharf(
        &b,
        &["queue", "enqueue", "cli.once", "m", "--msg-id", "x-1"],
    );
    let again = wharf(
        &b,
        &["queue", "enqueue", "cli.once", "m", "--msg-id", "x-1"],
    );
    assert!(first.ok() && again.ok(), "{first:?} {again:?}");
    assert_eq!(first.stdout.trim(), "1");
    assert_eq!(again.stdout.trim(), "1", "the same message: {again:?}");
}

#[test]
fn cluster_status_names_the_link_and_the_other_nodes_and_fails_when_the_link_is_down() {
    let single = TestBroker::start(|_| {});
    let s = wharf(&single, &["cluster", "status"]);
    assert!(s.ok(), "{s:?}");
    assert!(s.stdout.contains("not in a cluster"), "{s:?}");
    let nats = crate::cluster::Nats::start();
    let a = crate::cluster::node(&nats.url(), "a");
    let b = crate::cluster::node(&nats.url(), "b");
    assert!(
        common::wait_until(Duration::from_secs(20), || {
            let s = wharf(&a, &["cluster", "status"]);
            s.ok() && s.stdout.contains("b     up")
        }),
        "a hears b: {:?}",
        wharf(&a, &["cluster", "status"])
    );
    let s = wharf(&a, &["cluster", "status"]);
    assert!(s.stdout.contains("node a  link connected"), "{s:?}");
    let json = wharf(&a, &["cluster", "status", "--json"]);
    assert!(json.stdout.contains("\"peers\""), "{json:?}");
    // b stops: it says bye and is no longer listed; the link is fine.
    b.stop().unwrap();
    assert!(
        common::wait_until(Duration::from_secs(20), || {
            let s = wharf(&a, &["cluster", "status"]);
            s.ok() && s.stdout.contains("no other node heard")
        }),
        "{:?}",
        wharf(&a, &["cluster", "status"])
    );
    // NATS goes: the link is down, and the status says so with exit 1.
    drop(nats);
    assert!(
        common::wait_until(Duration::from_secs(20), || {
            let s = wharf(&a, &["cluster", "status"]);
            !s.ok() && s.stderr.contains("the NATS link is")
        }),
        "{:?}",
        wharf(&a, &["cluster", "status"])
    );
}
