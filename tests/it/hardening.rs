//! Attacks any client can make, over real sockets: names deep or long
//! enough to exhaust the stack or memory, a WebSocket frame header that
//! announces more than `max_frame`, and an HTTP body sent a byte at a time.
//! Each is refused, and the broker and its other clients carry on.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{TestBroker, block_on, http};
use wharf::client::mqtt::{MqttClient, MqttOptions};

/// A WebSocket connection made by hand, so that tests can send what no
/// well-behaved client library would.
struct RawWs {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl RawWs {
    fn connect(addr: SocketAddr, path: &str, protocol: Option<&str>) -> RawWs {
        let extra = protocol
            .map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n"))
            .unwrap_or_default();
        let (stream, head) = upgrade(addr, path, &extra);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        RawWs {
            stream,
            buf: Vec::new(),
        }
    }

    /// A masked frame header (mask key 0, so the payload goes as is).
    fn header(opcode: u8, len: u64) -> Vec<u8> {
        let mut h = vec![0x80 | opcode];
        if len < 126 {
            h.push(0x80 | len as u8);
        } else if len <= u64::from(u16::MAX) {
            h.push(0x80 | 126);
            h.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            h.push(0x80 | 127);
            h.extend_from_slice(&len.to_be_bytes());
        }
        h.extend_from_slice(&[0, 0, 0, 0]);
        h
    }

    fn send(&mut self, opcode: u8, payload: &[u8]) {
        let mut frame = Self::header(opcode, payload.len() as u64);
        frame.extend_from_slice(payload);
        self.stream.write_all(&frame).unwrap();
    }

    fn send_text(&mut self, text: &str) {
        self.send(1, text.as_bytes());
    }

    /// The next frame from the server: (opcode, payload); `None` when the
    /// connection ends or nothing comes within the read timeout.
    fn next(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 2 {
                let len7 = usize::from(self.buf[1] & 0x7f);
                let (len, start) = match len7 {
                    126 if self.buf.len() >= 4 => (
                        usize::from(u16::from_be_bytes([self.buf[2], self.buf[3]])),
                        4,
                    ),
                    127 if self.buf.len() >= 10 => {
                        let b: [u8; 8] = self.buf[2..10].try_into().unwrap();
                        (u64::from_be_bytes(b) as usize, 10)
                    }
                    126 | 127 => (usize::MAX, 0),
                    n => (n, 2),
                };
                if len != usize::MAX && self.buf.len() >= start + len {
                    let opcode = self.buf[0] & 0x0f;
                    let payload = self.buf[start..start + len].to_vec();
                    self.buf.drain(..start + len);
                    return Some((opcode, payload));
                }
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The next text frame as JSON, skipping pings.
    fn next_json(&mut self) -> serde_json::Value {
        loop {
            let (op, payload) = self.next().expect("a frame");
            match op {
                1 => return serde_json::from_slice(&payload).unwrap(),
                9 | 10 => continue,
                other => panic!("unexpected opcode {other}: {payload:?}"),
            }
        }
    }

    /// The code of the server's close frame, skipping what comes before.
    fn close_code(&mut self) -> Option<u16> {
        loop {
            let (op, payload) = self.next()?;
            if op == 8 {
                return Some(u16::from_be_bytes([*payload.first()?, *payload.get(1)?]));
            }
        }
    }
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn healthy(addr: SocketAddr) {
    let (status, body) = http(addr, "GET", "/health", "");
    assert_eq!(status, 200, "{body}");
}

/// The reported crash: a wildcard filter of thousands of levels, then the
/// end of its subscription. It is refused with `invalid_filter` and the
/// request's rid, so is a topic past the limits; the broker lives on.
#[test]
fn deep_and_long_names_are_refused_over_the_native_protocol() {
    let b = TestBroker::start(|_| {});
    let mut ws = RawWs::connect(b.addr, "/ws", None);
    let deep = format!("{}#", "a/".repeat(8000));
    ws.send_text(&format!(
        r#"{{"op":"subscribe","id":"x","filter":"{deep}","rid":1}}"#
    ));
    let reply = ws.next_json();
    assert_eq!(reply["code"], "invalid_filter", "{reply}");
    assert_eq!(reply["rid"], 1);
    assert!(
        reply["message"]
            .as_str()
            .unwrap()
            .contains("max_name_bytes"),
        "{reply}"
    );
    let levels = format!("{}#", "a/".repeat(32));
    ws.send_text(&format!(
        r#"{{"op":"subscribe","id":"y","filter":"{levels}","rid":2}}"#
    ));
    let reply = ws.next_json();
    assert_eq!(reply["code"], "invalid_filter", "{reply}");
    assert!(
        reply["message"].as_str().unwrap().contains("max_levels"),
        "{reply}"
    );
    let topic = "t/".repeat(40) + "x";
    ws.send_text(&format!(
        r#"{{"op":"publish","topic":"{topic}","payload":"p","rid":3}}"#
    ));
    let reply = ws.next_json();
    assert_eq!(reply["code"], "invalid_topic", "{reply}");
    assert_eq!(reply["rid"], 3);
    ws.send_text(&format!(
        r#"{{"op":"enqueue","queue":"{topic}","payload":"p","rid":4}}"#
    ));
    assert_eq!(ws.next_json()["code"], "invalid_topic");
    // A filter at the limit is fine.
    let ok = format!("{}#", "a/".repeat(31));
    ws.send_text(&format!(
        r#"{{"op":"subscribe","id":"z","filter":"{ok}","rid":5}}"#
    ));
    assert_eq!(ws.next_json()["op"], "receipt");
    drop(ws);
    healthy(b.addr);

    let (status, body) = http(b.addr, "POST", &format!("/topics/{topic}"), "x");
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_topic"), "{body}");
    let (status, body) = http(b.addr, "POST", &format!("/queues/{topic}/messages"), "x");
    assert_eq!(status, 400, "{body}");
    healthy(b.addr);
}

/// At the widest limits a configuration allows, the deepest filters and
/// topics are matched, delivered and unsubscribed, and the broker goes on.
/// (That the trie's walks do not recurse is checked by its unit test, on
/// a small stack, at 100,000 levels.)
#[test]
fn the_widest_limits_do_not_crash_the_broker() {
    let b = TestBroker::start(|c| {
        c.topics.max_levels = 1024;
        c.topics.max_name_bytes = 65_535;
        c.session.max_frame = 1 << 20;
        c.session.max_payload = 1 << 16;
    });
    let deep_filter = format!("{}#", "a/".repeat(1023));
    let deep_plus = format!("{}a", "+/".repeat(1023));
    let deep_topic = format!("{}a", "a/".repeat(1023));
    let mut sub = RawWs::connect(b.addr, "/ws", None);
    for (id, f) in [("h", &deep_filter), ("p", &deep_plus)] {
        sub.send_text(&format!(
            r#"{{"op":"subscribe","id":"{id}","filter":"{f}","rid":1}}"#
        ));
        assert_eq!(sub.next_json()["op"], "receipt");
    }
    let mut publisher = RawWs::connect(b.addr, "/ws", None);
    publisher.send_text(&format!(
        r#"{{"op":"publish","topic":"{deep_topic}","payload":"p","rid":2}}"#
    ));
    assert_eq!(publisher.next_json()["op"], "receipt");
    let mut subs = Vec::new();
    for _ in 0..2 {
        let m = sub.next_json();
        assert_eq!(m["op"], "message", "{m}");
        subs.push(m["sub"].as_str().unwrap().to_owned());
    }
    subs.sort();
    assert_eq!(subs, ["h", "p"]);
    // The end of the subscriptions prunes their deep branches.
    drop(sub);
    publisher.send_text(r#"{"op":"ping","rid":3}"#);
    assert_eq!(publisher.next_json()["op"], "pong");
    healthy(b.addr);
}

/// MQTT: a filter past the limits gets SUBACK 0x80 and the connection
/// goes on; a PUBLISH to a topic past them closes that connection only.
#[test]
fn deep_names_over_mqtt_get_suback_0x80_or_a_close() {
    let b = TestBroker::start(|_| {});
    let url = format!("ws://{}/mqtt", b.addr);
    block_on(async {
        let mut c = MqttClient::connect(&url, MqttOptions::default())
            .await
            .unwrap();
        let deep = format!("{}#", "a/".repeat(8000));
        assert_eq!(c.subscribe(&deep, 0).await.unwrap(), 0x80);
        assert_eq!(c.subscribe("ok/+", 0).await.unwrap(), 0);
        let mut other = MqttClient::connect(&url, MqttOptions::default())
            .await
            .unwrap();
        let topic = "t/".repeat(40) + "x";
        c.publish(&topic, b"p".to_vec(), 0, false).await.unwrap();
        assert!(c.closed().await.is_some(), "the connection is closed");
        other.ping().await.unwrap();
    });
    healthy(b.addr);
}

/// 200 subscriptions with filters at the default limits (32 levels, 1 KiB,
/// no shared prefix) cost a bounded amount of memory: the reported attack
/// (200 filters of 3,000 levels) cost 302 MiB.
#[test]
fn memory_per_subscription_stays_bounded() {
    let b = TestBroker::start(|_| {});
    let mut ws = RawWs::connect(b.addr, "/ws", None);
    let before = rss_bytes();
    for i in 0..200 {
        // 31 levels of 32 bytes each (1023 bytes with the '/'s), then '#'.
        let level = |j: usize| format!("{i:04}{j:04}{}", "x".repeat(23));
        let filter = (0..30).map(level).collect::<Vec<_>>().join("/") + "/#";
        assert!(
            filter.len() <= 1024 && filter.len() > 900,
            "{}",
            filter.len()
        );
        ws.send_text(&format!(
            r#"{{"op":"subscribe","id":"s{i}","filter":"{filter}","rid":{i}}}"#
        ));
        assert_eq!(ws.next_json()["op"], "receipt");
    }
    let grown = rss_bytes().saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "200 subscriptions grew the process by {} KiB",
        grown >> 10
    );
}

/// A frame header announcing 2^40 bytes is refused as soon as it is read
/// (close 1009), on /ws and /mqtt: the broker does not buffer what follows.
#[test]
fn a_header_announcing_more_than_max_frame_closes_at_once_with_1009() {
    let b = TestBroker::start(|_| {});
    // Warm up: the first connections touch thread stacks and allocator
    // arenas that are no attack's doing.
    for _ in 0..4 {
        let mut ws = RawWs::connect(b.addr, "/ws", None);
        ws.send_text(r#"{"op":"ping","rid":1}"#);
        assert_eq!(ws.next_json()["op"], "pong");
    }
    for (path, protocol) in [("/ws", None), ("/mqtt", Some("mqtt"))] {
        let before = rss_bytes();
        let mut ws = RawWs::connect(b.addr, path, protocol);
        ws.stream
            .set_write_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        ws.stream.write_all(&RawWs::header(2, 1 << 40)).unwrap();
        // Stream bytes after it until the server closes: it must close long
        // before the 64 MiB this would send.
        let chunk = vec![0u8; 64 << 10];
        let started = Instant::now();
        let mut sent = 0usize;
        while sent < 64 << 20 && started.elapsed() < Duration::from_secs(10) {
            match ws.stream.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        assert_eq!(ws.close_code(), Some(1009), "{path}");
        let grown = rss_bytes().saturating_sub(before);
        assert!(
            grown < 10 << 20,
            "{path}: grew by {} KiB for {} KiB sent",
            grown >> 10,
            sent >> 10
        );
    }
    let mut ws = RawWs::connect(b.addr, "/ws", None);
    ws.send_text(r#"{"op":"ping","rid":1}"#);
    assert_eq!(ws.next_json()["op"], "pong");
}

/// Starts a POST whose body (100 bytes announced) never arrives; returns
/// the stream, with its headers sent. They ask for `100 Continue` (see
/// [`continued`]).
fn slow_post(addr: SocketAddr, path: &str) -> TcpStream {
    let mut t = TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 100\r\n\
         Expect: 100-continue\r\n\r\n"
    );
    t.write_all(head.as_bytes()).unwrap();
    t
}

/// Waits for the `100 Continue` of a [`slow_post`]: the server sends it
/// once it has handed the request to its route, whose first step (no
/// await before it) takes a body slot; the continue is written out after
/// that step. From then on the request holds its slot, so a body sent
/// now cannot take it first and have this request refused instead.
fn continued(t: &mut TcpStream) {
    let expected = b"HTTP/1.1 100 Continue\r\n\r\n";
    let mut got = [0u8; 25];
    let read = t.read_exact(&mut got);
    assert!(
        read.is_ok() && got == *expected,
        "no 100 Continue: {read:?} {:?}",
        String::from_utf8_lossy(&got)
    );
}

/// The status of the response on `t`, once it arrives, and whether the
/// server then closed the connection.
fn status_and_close(t: &mut TcpStream) -> (u16, bool) {
    let mut raw = Vec::new();
    let closed = t.read_to_end(&mut raw).is_ok();
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, closed)
}

/// A body that trickles in (a byte every 100 ms, 25 bytes, then nothing)
/// is cut at `body_timeout_s` with 408 although no gap between its bytes
/// is long; past `max_body_reads` bodies in progress, a request with a
/// body is refused at once with 503, and other routes are unaffected.
/// (The trickle stops before the cut: a write after the server closed
/// would reset the connection and could take the 408 with it.)
#[test]
fn slow_request_bodies_are_cut_and_capped() {
    let b = TestBroker::start(|c| {
        c.server.body_timeout_s = 3;
        c.server.max_body_reads = 2;
    });
    let started = Instant::now();
    let mut dribbler = slow_post(b.addr, "/topics/slow");
    let mut writer = dribbler.try_clone().unwrap();
    let feeding = std::thread::spawn(move || {
        for _ in 0..25 {
            if writer.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let mut silent = slow_post(b.addr, "/queues/q/messages");
    // Both bodies are being read (each holds a slot once its continue
    // came): the next one is refused at once. A third body sent before
    // that could take a slot just as one of them asked for it, and have
    // that one refused instead (then no third body ever is).
    continued(&mut dribbler);
    continued(&mut silent);
    let (status, body) = http(b.addr, "POST", "/topics/third", "x");
    assert_eq!(status, 503, "a third body was not refused: {body}");
    assert!(body.contains("max_body_reads"), "{body}");
    healthy(b.addr);
    feeding.join().unwrap();
    assert_eq!(status_and_close(&mut dribbler), (408, true));
    assert_eq!(status_and_close(&mut silent), (408, true));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(10),
        "{took:?}"
    );
    // The slots are free again.
    let (status, body) = http(b.addr, "POST", "/topics/after", "x");
    assert_eq!(status, 202, "{body}");
}

/// Sends a WebSocket upgrade to `path` with `extra` headers; the stream
/// and the response's head (empty if the server closed first).
fn upgrade(addr: SocketAddr, path: &str, extra: &str) -> (TcpStream, String) {
    common::ws_upgrade(addr, path, extra)
}

/// The status of a WebSocket upgrade to `path` sent with `extra` headers.
fn upgrade_status(addr: SocketAddr, path: &str, extra: &str) -> u16 {
    upgrade(addr, path, extra)
        .1
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Cross-site WebSocket hijacking: a page on a foreign origin cannot open
/// a WebSocket to the broker (403), a listed origin and the broker's own
/// can, and clients that send no Origin are unaffected.
#[test]
fn websocket_upgrades_from_foreign_origins_are_refused() {
    let b = TestBroker::start(|c| {
        c.server.allowed_origins = vec!["https://app.example".into()];
    });
    let own = format!("Origin: http://{}\r\n", b.addr);
    for path in ["/ws", "/mqtt"] {
        let mqtt = if path == "/mqtt" {
            "Sec-WebSocket-Protocol: mqtt\r\n"
        } else {
            ""
        };
        let status = |origin: &str| upgrade_status(b.addr, path, &format!("{origin}{mqtt}"));
        assert_eq!(status("Origin: https://evil.example\r\n"), 403, "{path}");
        assert_eq!(status("Origin: null\r\n"), 403, "{path}");
        assert_eq!(status("Origin: https://app.example\r\n"), 101, "{path}");
        assert_eq!(status(&own), 101, "{path}");
        assert_eq!(status(""), 101, "{path}: no Origin");
    }
}

/// One HTTP/1.1 request written as given (`head`: the request line and
/// every header, `Host` included): the status and the body.
fn raw_http(addr: SocketAddr, head: &str, body: &str) -> (u16, String) {
    let mut t = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let close = if head.contains("Connection:") {
        ""
    } else {
        "Connection: close\r\n"
    };
    write!(
        t,
        "{head}{close}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = t.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// A web page cannot drive the default (anonymous, loopback) broker
/// through a user's browser: every changing request with a foreign
/// Origin is refused with 403 `forbidden_origin` before it acts (nothing
/// published, enqueued or deleted), while the broker's own origin and
/// clients without an Origin go through.
#[test]
fn changing_http_requests_from_foreign_origins_are_refused() {
    let b = TestBroker::start(|_| {});
    let addr = b.addr;
    let host = format!("Host: {addr}\r\n");
    let evil = "Origin: https://evil.example\r\n";
    let changes = [
        ("POST", "/topics/t/x?retain=true", "x"),
        ("POST", "/queues/q/messages", "x"),
        ("DELETE", "/queues/q", ""),
        ("DELETE", "/queues/q/messages", ""),
        (
            "POST",
            "/jobs",
            r#"{"kind":"k","entity_id":"0190a6f0-0000-7000-8000-000000000001","data":{}}"#,
        ),
        ("POST", "/workers", r#"{"kinds":["k"]}"#),
        ("POST", "/admin/rules/reload", ""),
    ];
    for (method, path, body) in changes {
        let (status, reply) = raw_http(
            addr,
            &format!("{method} {path} HTTP/1.1\r\n{host}{evil}"),
            body,
        );
        assert_eq!(status, 403, "{method} {path}: {reply}");
        assert!(
            reply.contains("forbidden_origin"),
            "{method} {path}: {reply}"
        );
    }
    // Nothing of it happened: the queue was never created.
    let (status, _) = raw_http(addr, &format!("GET /queues/q HTTP/1.1\r\n{host}"), "");
    assert_eq!(status, 404);
    // The broker's own page, and a client without an Origin, may.
    let own = format!("Origin: http://{addr}\r\n");
    let (status, reply) = raw_http(
        addr,
        &format!("POST /queues/q/messages HTTP/1.1\r\n{host}{own}"),
        "x",
    );
    assert!((200..300).contains(&status), "{reply}");
    let (status, reply) = raw_http(
        addr,
        &format!("POST /queues/q/messages HTTP/1.1\r\n{host}"),
        "x",
    );
    assert!((200..300).contains(&status), "{reply}");
    // Reads are not refused for their Origin.
    let (status, reply) = raw_http(addr, &format!("GET /queues/q HTTP/1.1\r\n{host}{evil}"), "");
    assert_eq!(status, 200, "{reply}");
}

/// DNS rebinding: a request (or upgrade) whose Host is a name the broker
/// does not answer to gets 403 `forbidden_host`, reads included, even
/// with a matching Origin; IP addresses, localhost and listed names pass.
#[test]
fn requests_for_foreign_host_names_are_refused() {
    let b = TestBroker::start(|c| {
        c.server.allowed_hosts = vec!["broker.example".into()];
    });
    let addr = b.addr;
    let port = addr.port();
    let rebound = format!("Host: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\n");
    for (method, path) in [
        ("GET", "/queues"),
        ("GET", "/admin/overview"),
        ("GET", "/queues/q/messages"),
        ("POST", "/topics/t/x"),
        ("DELETE", "/queues/q"),
    ] {
        let (status, reply) =
            raw_http(addr, &format!("{method} {path} HTTP/1.1\r\n{rebound}"), "x");
        assert_eq!(status, 403, "{method} {path}: {reply}");
        assert!(reply.contains("forbidden_host"), "{method} {path}: {reply}");
    }
    for path in ["/ws", "/mqtt"] {
        let mqtt = if path == "/mqtt" {
            "Sec-WebSocket-Protocol: mqtt\r\n"
        } else {
            ""
        };
        // common::ws_upgrade sends its own Host; a raw upgrade here.
        let head = format!(
            "GET {path} HTTP/1.1\r\n{rebound}Upgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{mqtt}"
        );
        let (status, _) = raw_http(addr, &head, "");
        assert_eq!(status, 403, "{path}");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("broker.example:{port}"),
    ] {
        let (status, reply) = raw_http(
            addr,
            &format!("GET /queues HTTP/1.1\r\nHost: {host}\r\n"),
            "",
        );
        assert_eq!(status, 200, "{host}: {reply}");
    }
}
