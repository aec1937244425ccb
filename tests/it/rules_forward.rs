//! Rules' `forward` action against real HTTP backends (actix-web servers
//! started by the tests on loopback): the method picked from a payload
//! field, the publisher's order, round robin and backend health, retries
//! then dead letters, and 4xx answers that are not retried.

use crate::common;

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use common::{TestBroker, block_on, eventually, http, wait_until};
use serde_json::Value;
use wharf::client::{Client, ClientOptions};
use wharf::protocol::frame::{Headers, Priority};

const T: Duration = Duration::from_secs(10);

/// One request a backend got.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct State {
    seen: Mutex<Vec<Seen>>,
    status: AtomicU16,
}

/// An HTTP backend on its own thread, answering every request with the
/// status the test sets, and recording it.
struct Backend {
    addr: SocketAddr,
    state: Arc<State>,
    handle: actix_web::dev::ServerHandle,
    thread: Option<thread::JoinHandle<()>>,
}

async fn record(req: HttpRequest, body: web::Bytes, state: web::Data<Arc<State>>) -> HttpResponse {
    let seen = Seen {
        method: req.method().to_string(),
        path: req.path().to_owned(),
        headers: req
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    state.seen.lock().unwrap().push(seen);
    let status = state.status.load(Ordering::SeqCst);
    HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap()).body("answer")
}

impl Backend {
    fn start(status: u16) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            seen: Mutex::new(Vec::new()),
            status: AtomicU16::new(status),
        });
        let shared = state.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(web::Data::new(shared.clone()))
                        .default_service(web::to(record))
                })
                .workers(1)
                .disable_signals()
                .listen(listener)
                .unwrap()
                .run();
                tx.send(server.handle()).unwrap();
                let _ = server.await;
            });
        });
        let handle = rx.recv_timeout(T).expect("the backend starts");
        Backend {
            addr,
            state,
            handle,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }

    fn answer(&self, status: u16) {
        self.state.status.store(status, Ordering::SeqCst);
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // Sends the stop at once; the thread ends with the server.
        drop(self.handle.stop(false));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A loopback URL nobody listens on.
fn closed_url() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/nobody")
}

/// A broker with the `[[rules]]` (and `[[queues]]`) of a TOML document.
fn broker(text: &str) -> TestBroker {
    let config = wharf::Config::from_toml(text).expect("the rules parse");
    wharf::rules::compile(&config.rules).expect("the rules compile");
    TestBroker::start(move |c| {
        c.rules = config.rules;
        c.queues = config.queues;
    })
}

async fn connect(b: &TestBroker, id: &str) -> Client {
    let options = ClientOptions {
        client_id: Some(id.into()),
        ..ClientOptions::default()
    };
    Client::connect(&b.ws_url(), options)
        .await
        .expect("connect")
}

async fn publish_h(c: &Client, topic: &str, payload: &str, h: &[(&str, &str)]) {
    let headers: Headers = h
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    c.publish_with(
        topic,
        payload.as_bytes().to_vec(),
        headers,
        false,
        Priority::Normal,
        true,
    )
    .await
    .expect("publish confirmed");
}

fn get(b: &TestBroker, path: &str) -> Value {
    let (status, body) = http(b.addr, "GET", path, "");
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// The forward report of the rule's action `step`.
fn forward_report(b: &TestBroker, rule: &str, step: usize) -> Value {
    let v = get(b, "/admin/rules");
    let r = v["rules"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["name"] == rule))
        .unwrap_or_else(|| panic!("no rule {rule}: {v}"));
    assert_eq!(r["then"][step]["kind"], "forward", "{r}");
    r["then"][step]["forward"].clone()
}

/// The forward report of the rule's first action once `cond` holds (the
/// counters move just after the backend answers).
fn settled(b: &TestBroker, rule: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let ok = wait_until(T, || {
        last = forward_report(b, rule, 0);
        cond(&last)
    });
    assert!(ok, "never settled: {last}");
    last
}

fn depth(b: &TestBroker, queue: &str) -> Option<u64> {
    let (status, body) = http(b.addr, "GET", &format!("/queues/{queue}"), "");
    match status {
        200 => serde_json::from_str::<Value>(&body).unwrap()["depth"].as_u64(),
        404 => None,
        _ => panic!("GET /queues/{queue}: {status} {body}"),
    }
}

fn browse(b: &TestBroker, queue: &str) -> Vec<Value> {
    get(b, &format!("/queues/{queue}/messages"))["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[test]
fn the_method_comes_from_a_payload_field_and_a_publishers_order_holds() {
    let backend = Backend::start(200);
    let b = broker(&format!(
        r#"
        [[rules]]
        name = "items"
        when = {{ topic = "items/#" }}
        then = [ {{ forward = {{ urls = ["{}"], method_from = "action", methods = {{ add = "POST", update = "put", delete = "DELETE" }}, headers = ["x-trace"], timeout_ms = 2000, dead_letter = "items-dlq" }} }} ]
        "#,
        backend.url("/hook")
    ));
    block_on(async {
        let c = connect(&b, "shop").await;
        let sent = [
            ("items/1", r#"{"action":"add","id":1}"#, "POST"),
            ("items/1", r#"{"action":"update","id":1}"#, "PUT"),
            ("items/2", r#"{"action":"delete","id":2}"#, "DELETE"),
        ];
        for (topic, payload, _) in sent {
            publish_h(&c, topic, payload, &[("x-trace", "t-1"), ("secret", "s")]).await;
        }
        assert!(eventually(T, || backend.count() >= 3).await);
        let seen = backend.seen();
        for (s, (topic, payload, method)) in seen.iter().zip(sent) {
            assert_eq!(s.method, method, "{s:?}");
            assert_eq!(s.path, "/hook");
            assert_eq!(s.body, payload);
            assert_eq!(s.header("x-wharf-topic"), Some(topic), "{s:?}");
            assert_eq!(s.header("x-trace"), Some("t-1"), "{s:?}");
            assert_eq!(s.header("secret"), None, "only the listed headers: {s:?}");
        }

        // A value the table lacks, with no default method: dead-lettered.
        publish_h(&c, "items/3", r#"{"action":"archive"}"#, &[]).await;
        let mut dlq = None;
        assert!(
            eventually(T, || {
                dlq = depth(&b, "items-dlq");
                dlq == Some(1)
            })
            .await,
            "{dlq:?}"
        );
        let m = &browse(&b, "items-dlq")[0];
        assert_eq!(m["headers"]["rule"], "items", "{m}");
        assert_eq!(m["headers"]["dead-letter-topic"], "items/3", "{m}");
        assert!(
            m["headers"]["forward-error"]
                .as_str()
                .unwrap_or("")
                .contains("action"),
            "{m}"
        );

        // Fifty from one publisher (pipelined): they arrive in order.
        for n in 0..50 {
            let payload = format!(r#"{{"action":"add","n":{n}}}"#);
            if n == 49 {
                c.publish_confirmed("items/bulk", payload.into_bytes())
                    .await
                    .unwrap();
            } else {
                c.publish("items/bulk", payload.into_bytes()).await.unwrap();
            }
        }
        assert!(
            eventually(T, || backend.count() >= 53).await,
            "{}",
            backend.count()
        );
    });
    let seen = backend.seen();
    assert_eq!(seen.len(), 53, "nothing more, nothing twice");
    let order: Vec<u64> = seen[3..]
        .iter()
        .map(|s| {
            serde_json::from_str::<Value>(&s.body).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(order, (0..50).collect::<Vec<u64>>());
    let f = settled(&b, "items", |f| f["forwarded"] == 53);
    assert_eq!(f["dead_lettered"], 1, "{f}");
    assert_eq!(f["retried"], 0, "{f}");
    assert_eq!(f["backends"][0]["requests"], 53, "{f}");
}

#[test]
fn round_robin_and_a_failing_backend_is_skipped() {
    let (one, two) = (Backend::start(200), Backend::start(200));
    let b = broker(&format!(
        r#"
        [[rules]]
        name = "rr"
        when = {{ topic = "rr/#" }}
        then = [ {{ forward = {{ urls = ["{}", "{}"], timeout_ms = 2000, retries = 3, backoff_ms = 10, fail_after = 2, skip_s = 600 }} }} ]
        "#,
        one.url("/one"),
        two.url("/two")
    ));
    block_on(async {
        let c = connect(&b, "rr-pub").await;
        for n in 0..10 {
            c.publish_confirmed("rr/x", format!("a{n}").into_bytes())
                .await
                .unwrap();
        }
        assert!(eventually(T, || one.count() + two.count() >= 10).await);
        assert_eq!((one.count(), two.count()), (5, 5), "taken in turn");

        // The second one fails from now on: each message it is offered is
        // retried on the first, and after two failures in a row it is
        // skipped.
        two.answer(500);
        for n in 0..10 {
            c.publish_confirmed("rr/x", format!("b{n}").into_bytes())
                .await
                .unwrap();
        }
        assert!(eventually(T, || one.count() >= 15).await, "{}", one.count());
    });
    let f = settled(&b, "rr", |f| f["forwarded"] == 20);
    assert_eq!(f["dead_lettered"], 0, "{f}");
    let backends = f["backends"].as_array().unwrap();
    assert_eq!(backends[0]["down"], false, "{f}");
    assert_eq!(backends[1]["down"], true, "{f}");
    assert_eq!(backends[1]["failures"], 2, "{f}");
    assert_eq!(f["retried"], 2, "{f}");
    assert_eq!(two.count(), 7, "5 answered, then 2 failures, then skipped");
    let bodies: Vec<String> = one.seen().into_iter().map(|s| s.body).collect();
    let second: Vec<&str> = bodies[5..].iter().map(String::as_str).collect();
    let want: Vec<String> = (0..10).map(|n| format!("b{n}")).collect();
    assert_eq!(
        second, want,
        "every message reached the healthy backend, in order"
    );
    assert_eq!(backends[0]["requests"], 15, "{f}");
    assert_eq!(backends[1]["requests"], 7, "{f}");
}

#[test]
fn backends_that_all_fail_dead_letter_after_the_retries() {
    let failing = Backend::start(500);
    let nobody = closed_url();
    let b = broker(&format!(
        r#"
        [[rules]]
        name = "down"
        when = {{ topic = "down/#" }}
        then = [ {{ forward = {{ urls = ["{}", "{nobody}"], timeout_ms = 2000, retries = 2, backoff_ms = 10, fail_after = 1000, dead_letter = "fwd-dlq" }} }} ]
        "#,
        failing.url("/fail")
    ));
    block_on(async {
        let c = connect(&b, "down-pub").await;
        for n in 0..4 {
            publish_h(
                &c,
                &format!("down/{n}"),
                &format!("m{n}"),
                &[("x-trace", "t")],
            )
            .await;
        }
        assert!(
            eventually(T, || depth(&b, "fwd-dlq") == Some(4)).await,
            "{:?}",
            depth(&b, "fwd-dlq")
        );
    });
    let msgs = browse(&b, "fwd-dlq");
    let payloads: Vec<&str> = msgs
        .iter()
        .map(|m| m["payload"].as_str().unwrap())
        .collect();
    assert_eq!(payloads, ["m0", "m1", "m2", "m3"]);
    for (n, m) in msgs.iter().enumerate() {
        let h = &m["headers"];
        let err = h["forward-error"].as_str().unwrap_or("");
        assert!(!err.is_empty(), "{m}");
        assert_eq!(h["rule"], "down", "{m}");
        assert_eq!(h["dead-letter-topic"], format!("down/{n}"), "{m}");
        assert_eq!(h["x-trace"], "t", "{m}");
    }
    let f = settled(&b, "down", |f| f["dead_lettered"] == 4);
    assert_eq!(f["forwarded"], 0, "{f}");
    assert_eq!(f["dropped"], 0, "{f}");
    assert_eq!(f["retried"], 8, "two retries each: {f}");
    let requests: u64 = f["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["requests"].as_u64().unwrap())
        .sum();
    assert_eq!(requests, 12, "three attempts each: {f}");
    assert_eq!(
        f["backends"][0]["requests"].as_u64(),
        Some(failing.count() as u64),
        "{f}"
    );
    assert!(
        failing
            .seen()
            .iter()
            .all(|s| s.header("x-trace") == Some("t"))
    );
}

#[test]
fn a_4xx_answer_is_not_retried_and_is_dead_lettered() {
    let refusing = Backend::start(400);
    let b = broker(&format!(
        r#"
        [[rules]]
        name = "picky"
        when = {{ topic = "picky/#" }}
        then = [ {{ forward = {{ urls = ["{}"], method = "PATCH", timeout_ms = 2000, retries = 3, backoff_ms = 10, fail_after = 1000, dead_letter = "picky-dlq" }} }} ]
        "#,
        refusing.url("/p")
    ));
    block_on(async {
        let c = connect(&b, "picky-pub").await;
        for n in 0..3 {
            publish_h(&c, "picky/x", &format!("p{n}"), &[]).await;
        }
        assert!(eventually(T, || depth(&b, "picky-dlq") == Some(3)).await);
    });
    assert_eq!(refusing.count(), 3, "one request per message");
    assert!(refusing.seen().iter().all(|s| s.method == "PATCH"));
    let f = settled(&b, "picky", |f| f["dead_lettered"] == 3);
    assert_eq!(f["retried"], 0, "{f}");
    assert_eq!(f["backends"][0]["requests"], 3, "{f}");
    assert_eq!(
        f["backends"][0]["down"], false,
        "a refusal is not a failure: {f}"
    );
    for m in browse(&b, "picky-dlq") {
        let err = m["headers"]["forward-error"].as_str().unwrap_or("");
        assert!(err.contains("400"), "{m}");
    }
    // 408 and 429 are retried, unlike other 4xx answers.
    refusing.answer(429);
    block_on(async {
        let c = connect(&b, "picky-pub").await;
        publish_h(&c, "picky/x", "busy", &[]).await;
        assert!(eventually(T, || depth(&b, "picky-dlq") == Some(4)).await);
    });
    assert_eq!(
        refusing.count(),
        3 + 4,
        "429: the first attempt and three retries"
    );
    let f = settled(&b, "picky", |f| f["dead_lettered"] == 4);
    assert_eq!(f["retried"], 3, "{f}");
    assert_eq!(f["backends"][0]["failures"], 4, "{f}");
}

#[test]
fn a_full_buffer_dead_letters_at_once() {
    let nobody = closed_url();
    let b = broker(&format!(
        r#"
        [[rules]]
        name = "narrow"
        when = {{ topic = "narrow/#" }}
        then = [ {{ forward = {{ urls = ["{nobody}"], timeout_ms = 2000, retries = 1, backoff_ms = 2000, fail_after = 1000, in_flight = 1, buffer = 1, dead_letter = "full-dlq" }} }} ]
        "#
    ));
    block_on(async {
        let c = connect(&b, "narrow-pub").await;
        publish_h(&c, "narrow/x", "m1", &[]).await;
        // m1 is in the lane, waiting for its retry; m2 takes the one place
        // in the buffer and m3 finds it full.
        assert!(
            eventually(T, || forward_report(&b, "narrow", 0)["retried"] == 1).await,
            "{}",
            forward_report(&b, "narrow", 0)
        );
        publish_h(&c, "narrow/x", "m2", &[]).await;
        publish_h(&c, "narrow/x", "m3", &[]).await;
        let f = forward_report(&b, "narrow", 0);
        assert_eq!(f["buffered"], 1, "{f}");
        assert_eq!(f["dead_lettered"], 1, "m3 at once: {f}");
    });
    let f = settled(&b, "narrow", |f| f["dead_lettered"] == 3);
    assert_eq!(f["buffered"], 0, "{f}");
    assert_eq!(
        f["backends"][0]["requests"], 4,
        "m1 and m2 tried twice: {f}"
    );
    assert!(wait_until(T, || depth(&b, "full-dlq") == Some(3)));
    let msgs = browse(&b, "full-dlq");
    let errors: Vec<(&str, &str)> = msgs
        .iter()
        .map(|m| {
            (
                m["payload"].as_str().unwrap(),
                m["headers"]["forward-error"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(errors[0].0, "m3", "{errors:?}");
    assert!(errors[0].1.contains("buffer"), "{errors:?}");
    let rest: Vec<&str> = errors[1..].iter().map(|e| e.0).collect();
    assert_eq!(rest, ["m1", "m2"]);
    let v = get(&b, "/admin/rules");
    let step = &v["rules"][0]["then"][0];
    assert_eq!(
        (step["runs"].as_u64(), step["failures"].as_u64()),
        (Some(3), Some(1)),
        "{step}"
    );
}

#[test]
fn a_dead_letter_queue_that_refuses_counts_as_dropped() {
    // README: "A message no backend took goes to dead_letter ... (without
    // one it is counted dropped)"; GET /admin/rules: `dropped` counts
    // messages lost because "there is no dead-letter queue, or it refused
    // them". This one holds a single message.
    let refusing = Backend::start(400);
    let b = broker(&format!(
        r#"
        [[queues]]
        name = "tiny-dlq"
        max_length = 1

        [[rules]]
        name = "tiny"
        when = {{ topic = "tiny/#" }}
        then = [ {{ forward = {{ urls = ["{}"], timeout_ms = 2000, dead_letter = "tiny-dlq" }} }} ]
        "#,
        refusing.url("/t")
    ));
    block_on(async {
        let c = connect(&b, "tiny-pub").await;
        for n in 0..3 {
            publish_h(&c, "tiny/x", &format!("t{n}"), &[]).await;
        }
    });
    let f = settled(&b, "tiny", |f| {
        f["dead_lettered"].as_u64().unwrap_or(0) + f["dropped"].as_u64().unwrap_or(0) == 3
    });
    assert_eq!(refusing.count(), 3);
    assert_eq!(depth(&b, "tiny-dlq"), Some(1), "the queue took one");
    assert_eq!(
        (f["dead_lettered"].as_u64(), f["dropped"].as_u64()),
        (Some(1), Some(2)),
        "two messages were lost, not dead-lettered: {f}"
    );
}

#[test]
fn a_message_header_does_not_replace_x_wharf_topic() {
    // The backend learns the topic from `x-wharf-topic`, which the broker
    // sets: a publisher's own header of that name must not replace it.
    let backend = Backend::start(200);
    let b = broker(&format!(
        r#"
        [[rules]]
        name = "hook"
        when = {{ topic = "hook/#" }}
        then = [ {{ forward = {{ urls = ["{}"], timeout_ms = 2000 }} }} ]
        "#,
        backend.url("/h")
    ));
    block_on(async {
        let c = connect(&b, "spoofer").await;
        let h = [("x-wharf-topic", "admin/secrets"), ("x-note", "n")];
        publish_h(&c, "hook/public", "hi", &h).await;
        assert!(eventually(T, || backend.count() >= 1).await);
    });
    let s = &backend.seen()[0];
    assert_eq!(s.header("x-note"), Some("n"), "{s:?}");
    let topics: Vec<&str> = s
        .headers
        .iter()
        .filter(|(k, _)| k == "x-wharf-topic")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(topics, ["hook/public"], "{s:?}");
}
