//! The live dashboard: the embedded page and its headers, the admin
//! stream (`GET /admin/stream`: its right, its events, its bound), and
//! the page in a real browser (Debian's chromium driven by playwright-core
//! through tests/browser/dashboard.mjs).

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TestBroker, block_on, http, http_request};
use serde_json::Value;
use wharf::client::{Client, ClientOptions};
use wharf::config::auth::{Permissions, TokenConfig};

const ROOT_TOKEN: &str = "dashboard-root-token";
const SVC_TOKEN: &str = "dashboard-svc-token";

/// The value of header `name` in a response head (lower-cased names).
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A broker whose tokens are root (every right) and svc (enqueue only):
/// anonymous clients are not let in.
fn auth_broker() -> TestBroker {
    TestBroker::start(|c| {
        c.auth.tokens.push(TokenConfig {
            name: "root".into(),
            token_sha256: wharf::auth::token_digest(ROOT_TOKEN),
            allow: Permissions::everything(),
        });
        c.auth.tokens.push(TokenConfig {
            name: "svc".into(),
            token_sha256: wharf::auth::token_digest(SVC_TOKEN),
            allow: Permissions {
                enqueue: vec!["orders".into()],
                ..Permissions::default()
            },
        });
    })
}

/// An open `GET /admin/stream`: the response head, then events.
struct Stream {
    reader: BufReader<TcpStream>,
    head: String,
    /// Decoded body bytes not yet returned as an event.
    pending: Vec<u8>,
}

impl Stream {
    /// Sends the request with `extra` header lines and reads the head.
    fn open(addr: SocketAddr, extra: &str) -> Stream {
        let mut t = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
        t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(
            t,
            "GET /admin/stream HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{extra}\r\n"
        )
        .unwrap();
        let mut reader = BufReader::new(t);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            let n = reader.read_line(&mut line).expect("a response head");
            assert!(n > 0, "the connection closed in the head: {head}");
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        Stream {
            reader,
            head,
            pending: Vec::new(),
        }
    }

    fn status(&self) -> u16 {
        self.head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .expect("a status code")
    }

    /// The next chunk of a chunked body (empty at its end).
    fn chunk(&mut self) -> Vec<u8> {
        let mut size = String::new();
        self.reader.read_line(&mut size).expect("a chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("a hex chunk size");
        let mut data = vec![0; size + 2];
        self.reader.read_exact(&mut data).expect("a chunk");
        data.truncate(size);
        data
    }

    /// The next event's data, parsed as JSON.
    fn event(&mut self) -> Value {
        assert_eq!(
            header(&self.head, "transfer-encoding"),
            Some("chunked"),
            "{}",
            self.head
        );
        loop {
            if let Some(end) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.pending.drain(..end + 2).collect();
                let text = String::from_utf8(event).expect("UTF-8 events");
                let data = text
                    .trim_end()
                    .strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("a data line: {text:?}"));
                return serde_json::from_str(data).expect("an event's data is JSON");
            }
            let chunk = self.chunk();
            assert!(!chunk.is_empty(), "the stream ended");
            self.pending.extend_from_slice(&chunk);
        }
    }

    /// The error body of a refused stream.
    fn error_body(&mut self) -> Value {
        let len: usize = header(&self.head, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("an error has a length: {}", self.head));
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).expect("the error body");
        serde_json::from_slice(&body).expect("a JSON error")
    }
}

#[test]
fn the_page_and_its_assets_are_embedded_with_strict_headers() {
    // The page needs no credentials, even where everything else does.
    let b = auth_broker();
    for path in ["/dashboard", "/dashboard/"] {
        let (status, head, body) = http_request(b.addr, "GET", path, "", "");
        assert_eq!(status, 200, "{path}: {head}");
        assert_eq!(
            header(&head, "content-type"),
            Some("text/html; charset=utf-8")
        );
        let csp = header(&head, "content-security-policy").expect("a CSP");
        assert!(csp.contains("default-src 'self'"), "{csp}");
        assert!(csp.contains("script-src 'self'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(header(&head, "x-content-type-options"), Some("nosniff"));
        assert_eq!(header(&head, "cache-control"), Some("no-cache"));
        assert!(body.contains(r#"<base href="/dashboard/">"#), "{body}");
        assert!(body.contains(r#"<script src="app.js" defer></script>"#));
        // No inline script: every <script> has a src.
        assert_eq!(
            body.matches("<script").count(),
            body.matches("<script src=").count()
        );
    }
    let (status, head, js) = http_request(b.addr, "GET", "/dashboard/app.js", "", "");
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        header(&head, "content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert!(js.contains("admin/stream"), "the script reads the stream");
    assert!(header(&head, "content-security-policy").is_some());
    let (status, head, css) = http_request(b.addr, "GET", "/dashboard/style.css", "", "");
    assert_eq!(status, 200, "{head}");
    assert_eq!(
        header(&head, "content-type"),
        Some("text/css; charset=utf-8")
    );
    assert!(css.contains("prefers-color-scheme"));
    let (status, head, _) = http_request(b.addr, "GET", "/dashboard/favicon.svg", "", "");
    assert_eq!(status, 200, "{head}");
    assert_eq!(header(&head, "content-type"), Some("image/svg+xml"));
    let (status, _) = http(b.addr, "POST", "/dashboard", "");
    assert_eq!(status, 405);
    let (status, _) = http(b.addr, "GET", "/dashboard/nothing.js", "");
    assert_eq!(status, 404);
}

#[test]
fn the_page_finds_its_base_under_a_scope() {
    // An app that mounts Wharf under /broker: the page's assets and the
    // API are found relative to the base it is given.
    let dir = tempfile::tempdir().unwrap();
    block_on(async move {
        let wharf = wharf::Wharf::builder()
            .data_dir(dir.path().join("data"))
            .workers(1)
            .start()
            .await
            .unwrap();
        let app = actix_web::test::init_service(
            actix_web::App::new()
                .service(actix_web::web::scope("/broker").configure(wharf.configure())),
        )
        .await;
        for path in ["/broker/dashboard", "/broker/dashboard/"] {
            let req = actix_web::test::TestRequest::get().uri(path).to_request();
            let body = actix_web::test::call_and_read_body(&app, req).await;
            let body = String::from_utf8_lossy(&body);
            assert!(
                body.contains(r#"<base href="/broker/dashboard/">"#),
                "{path}: {body}"
            );
        }
        let req = actix_web::test::TestRequest::get()
            .uri("/broker/dashboard/app.js")
            .to_request();
        let res = actix_web::test::call_service(&app, req).await;
        assert_eq!(res.status(), 200);
    });
}

#[test]
fn the_stream_needs_the_admin_right() {
    let b = auth_broker();
    let mut none = Stream::open(b.addr, "");
    assert_eq!(none.status(), 401, "{}", none.head);
    assert_eq!(none.error_body()["error"]["code"], "unauthorized");
    let mut svc = Stream::open(b.addr, &format!("Authorization: Bearer {SVC_TOKEN}\r\n"));
    assert_eq!(svc.status(), 403, "{}", svc.head);
    assert_eq!(svc.error_body()["error"]["code"], "forbidden");
    let mut root = Stream::open(b.addr, &format!("Authorization: Bearer {ROOT_TOKEN}\r\n"));
    assert_eq!(root.status(), 200, "{}", root.head);
    assert_eq!(
        header(&root.head, "content-type"),
        Some("text/event-stream")
    );
    let event = root.event();
    for key in ["t", "overview", "queues", "sessions", "jobs"] {
        assert!(event.get(key).is_some(), "{key} in {event}");
    }
}

#[test]
fn events_carry_the_admin_answers_once_a_second() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = Client::connect(
            &b.ws_url(),
            ClientOptions {
                client_id: Some("dashboard-test".into()),
                ..ClientOptions::default()
            },
        )
        .await
        .unwrap();
        c.publish_confirmed("dash/a", b"1".to_vec()).await.unwrap();
        for i in 0..3u8 {
            let (status, body) = http(b.addr, "POST", "/queues/dash-q/messages", &i.to_string());
            assert_eq!(status, 201, "{body}");
        }

        let mut s = Stream::open(b.addr, "");
        assert_eq!(s.status(), 200, "{}", s.head);
        assert_eq!(header(&s.head, "cache-control"), Some("no-cache"));
        let first = s.event();
        let o = &first["overview"];
        assert_eq!(o["sessions"]["native"], 1, "{first}");
        assert!(o["published"].as_u64().unwrap() >= 1, "{first}");
        assert!(o["resident_bytes"].is_u64() || o["resident_bytes"].is_null());
        let q = first["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == "dash-q")
            .unwrap_or_else(|| panic!("dash-q in {first}"));
        assert_eq!(q["depth"], 3);
        assert_eq!(q["dead_letter"], "dash-q.dlq");
        let sessions = first["sessions"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{first}");
        assert_eq!(sessions[0]["client_id"], "dashboard-test");
        assert!(sessions[0]["outbound"]["dropped"].is_u64());
        assert_eq!(first["jobs"]["workers"], 0, "{first}");
        // The same answers as the routes they stand for.
        let (_, overview) = http(b.addr, "GET", "/admin/overview", "");
        let overview: Value = serde_json::from_str(&overview).unwrap();
        assert_eq!(
            overview.as_object().unwrap().keys().collect::<Vec<_>>(),
            o.as_object().unwrap().keys().collect::<Vec<_>>()
        );
        let (_, queues) = http(b.addr, "GET", "/queues", "");
        let queues: Value = serde_json::from_str(&queues).unwrap();
        assert_eq!(queues, first["queues"]);

        // The next one about a second later, with what changed since.
        c.publish_confirmed("dash/a", b"2".to_vec()).await.unwrap();
        let started = Instant::now();
        let second = s.event();
        let gap = second["t"].as_u64().unwrap() - first["t"].as_u64().unwrap();
        assert!((500..=3000).contains(&gap), "{gap} ms between events");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(
            second["overview"]["published"].as_u64() > first["overview"]["published"].as_u64(),
            "{second}"
        );
    });
}

#[test]
fn streams_are_bounded_and_end_with_their_client() {
    let b = TestBroker::start(|_| {});
    let mut open: Vec<Stream> = (0..wharf::transport::MAX_STREAMS)
        .map(|_| {
            let mut s = Stream::open(b.addr, "");
            assert_eq!(s.status(), 200, "{}", s.head);
            s.event();
            s
        })
        .collect();
    let mut refused = Stream::open(b.addr, "");
    assert_eq!(refused.status(), 503, "{}", refused.head);
    let error = refused.error_body();
    assert_eq!(error["error"]["code"], "overloaded", "{error}");
    assert!(error["error"]["message"].is_string());
    // A client that goes away frees its slot within a tick or two.
    drop(open.pop());
    assert!(
        common::wait_until(Duration::from_secs(10), || {
            let s = Stream::open(b.addr, "");
            if s.status() == 200 {
                open.push(s);
                true
            } else {
                false
            }
        }),
        "a slot freed by a client that left"
    );
}

#[test]
fn streams_end_when_the_broker_shuts_down() {
    // A long shutdown timeout: an open dashboard must not use it up.
    let b = TestBroker::start(|c| c.server.shutdown_timeout_s = 20);
    let mut s = Stream::open(b.addr, "");
    assert_eq!(s.status(), 200, "{}", s.head);
    s.event();
    let started = Instant::now();
    b.stop().expect("a clean stop");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the stop took {:?}",
        started.elapsed()
    );
    // What is left of the stream ends (the last chunk, or a close).
    let mut rest = Vec::new();
    let _ = s.reader.read_to_end(&mut rest);
    assert!(
        rest.is_empty() || rest.ends_with(b"0\r\n\r\n") || rest.ends_with(b"\n\n"),
        "{:?}",
        String::from_utf8_lossy(&rest)
    );
}

/// Debian's chromium drives the page: the rates and a queue's depth
/// follow traffic made through the API, an action runs through the UI,
/// and a screenshot is saved (target/dashboard.png).
#[test]
fn the_dashboard_works_in_a_real_browser() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let driver = root.join("tests/browser/node_modules/playwright-core");
    assert!(
        driver.is_dir(),
        "playwright-core is not installed: run `npm ci --prefix tests/browser` \
         (scripts/test does)"
    );
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "no browser at {chromium}: install Debian's chromium (apt-get install chromium) or set CHROMIUM"
    );
    let shot = root.join("target/dashboard.png");
    std::fs::create_dir_all(root.join("target")).unwrap();
    let _ = std::fs::remove_file(&shot);

    let b = TestBroker::start(|_| {});
    let mut child = Command::new("node")
        .arg(root.join("tests/browser/dashboard.mjs"))
        .arg(format!("http://{}", b.addr))
        .arg(&shot)
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("node runs (apt-get install nodejs): {e}"));
    // Drained while it runs, so that a chatty child cannot block on a
    // full pipe.
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut out = String::new();
            let _ = r.read_to_string(&mut out);
            out
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = format!(
        "stdout:\n{}\nstderr:\n{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    let status = status.unwrap_or_else(|| panic!("dashboard.mjs ran over 90 s\n{output}"));
    assert!(
        status.success(),
        "dashboard.mjs failed ({status})\n{output}"
    );
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 0, "no screenshot at {}\n{output}", shot.display());
}

#[test]
fn the_javascript_client_is_served_as_built_with_an_etag() {
    let b = TestBroker::start(|_| {});
    let (code, head, body) = common::http_request(b.addr, "GET", "/client.js", "", "");
    assert_eq!(code, 200, "{head}");
    let built = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/js/dist/wharf.js"),
    )
    .unwrap();
    assert_eq!(body, built, "GET /client.js is clients/js/dist/wharf.js");
    let lower = head.to_lowercase();
    assert!(lower.contains("content-type: text/javascript"), "{head}");
    assert!(lower.contains("access-control-allow-origin: *"), "{head}");
    let etag = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("etag: ")
                .or_else(|| l.strip_prefix("ETag: "))
        })
        .expect("an ETag")
        .trim()
        .to_owned();
    let (code, _, body) = common::http_request(
        b.addr,
        "GET",
        "/client.js",
        &format!("If-None-Match: {etag}\r\n"),
        "",
    );
    assert_eq!((code, body.as_str()), (304, ""));
    let (code, _, _) = common::http_request(b.addr, "POST", "/client.js", "", "");
    assert_eq!(code, 405);
}
