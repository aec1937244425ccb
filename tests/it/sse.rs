//! `GET /sse` over real sockets: messages as Server-Sent Events, a
//! `recovery` answer to a reconnect, and the checks every way in has
//! (credentials, `subscribe`, the Origin).

use crate::common::{self, TestBroker};

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use wharf::config::auth::{Permissions, TokenConfig};

const WAIT: Duration = Duration::from_secs(10);

/// Opens `path` with `extra` header lines: the stream and the response
/// head.
pub(crate) fn open(addr: SocketAddr, path: &str, extra: &str) -> (TcpStream, String) {
    let mut t = TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    write!(
        t,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{extra}\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && Instant::now() < deadline {
        if let Ok(1) = t.read(&mut byte) {
            head.push(byte[0]);
        }
    }
    (t, String::from_utf8_lossy(&head).into_owned())
}

/// Reads the stream until `needle` has arrived: what came (chunk sizes
/// and all).
pub(crate) fn until(t: &mut TcpStream, needle: &str) -> String {
    let mut got = Vec::new();
    let deadline = Instant::now() + WAIT;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if String::from_utf8_lossy(&got).contains(needle) {
            break;
        }
        match t.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.contains(needle), "no {needle:?} in {text:?}");
    text
}

fn status_of(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn messages_arrive_as_events_with_their_topic_and_sequence() {
    let b = TestBroker::start(|_| {});
    let (mut t, head) = open(b.addr, "/sse?topic=news/%23", "");
    assert_eq!(status_of(&head), 200, "{head}");
    assert!(
        head.to_lowercase()
            .contains("content-type: text/event-stream"),
        "{head}"
    );
    // The subscription is in place once the response head is out.
    let (code, body) = common::http(b.addr, "POST", "/topics/news/a", "hello");
    assert_eq!(code, 202, "{body}");
    let text = until(&mut t, "hello");
    assert!(
        text.contains("id: news/a@1\nevent: message\ndata: {"),
        "{text}"
    );
    assert!(text.contains(r#""topic":"news/a""#), "{text}");
    // Headers travel with it.
    let (code, _, body) = common::http_request(
        b.addr,
        "POST",
        "/topics/news/b",
        "x-wharf-unit: C\r\n",
        "21.5",
    );
    assert_eq!(code, 202, "{body}");
    let text = until(&mut t, "news/b@1");
    assert!(text.contains(r#""headers":{"unit":"C"}"#), "{text}");
}

#[test]
fn a_reconnect_is_told_nothing_was_recovered() {
    let b = TestBroker::start(|_| {});
    let (mut t, head) = open(b.addr, "/sse?topic=news", "Last-Event-ID: news@7\r\n");
    assert_eq!(status_of(&head), 200, "{head}");
    let text = until(&mut t, "event: recovery");
    assert!(text.contains(r#""recovered":false"#), "{text}");
}

#[test]
fn credentials_rights_and_origin_are_checked() {
    let b = TestBroker::start(|c| {
        c.auth.tokens.push(TokenConfig {
            name: "reader".into(),
            token_sha256: wharf::auth::token_digest("reader-token"),
            allow: Permissions {
                subscribe: vec!["news/#".into()],
                ..Permissions::default()
            },
        });
    });
    // No credentials.
    let (_, head) = open(b.addr, "/sse?topic=news/a", "");
    assert_eq!(status_of(&head), 401, "{head}");
    // A token by query (EventSource sends no headers), for a topic it
    // may not read.
    let (_, head) = open(b.addr, "/sse?topic=secret/x&token=reader-token", "");
    assert_eq!(status_of(&head), 403, "{head}");
    // From a page on another origin.
    let (_, head) = open(
        b.addr,
        "/sse?topic=news/a&token=reader-token",
        "Origin: http://evil.example\r\n",
    );
    assert_eq!(status_of(&head), 403, "{head}");
    // A bad filter.
    let (_, head) = open(b.addr, "/sse?topic=news/%23/x&token=reader-token", "");
    assert_eq!(status_of(&head), 400, "{head}");
    // Allowed: by query, and by header.
    let (_t, head) = open(b.addr, "/sse?topic=news/a&token=reader-token", "");
    assert_eq!(status_of(&head), 200, "{head}");
    let (_u, head) = open(
        b.addr,
        "/sse?topic=news/a",
        "Authorization: Bearer reader-token\r\n",
    );
    assert_eq!(status_of(&head), 200, "{head}");
}
