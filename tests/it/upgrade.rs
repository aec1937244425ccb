//! The server's upgrade hook (`[server] lean_websockets`, on by default),
//! over raw TCP and real clients on loopback: WebSocket connections leave
//! actix-http for Wharf's own reader and writer (src/transport/raw.rs)
//! after the same routes accepted them. Frames the
//! client sends before the 101 arrives are not lost, refusals keep their
//! JSON answers, and other requests that ask for an upgrade are answered
//! as usual and closed. With it off, connections stay in actix-http (the
//! way of an app that mounts Wharf's routes) and carry the same traffic.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use wharf::client::{Client, ClientOptions};
use wharf::protocol::Format;

use crate::common::{TestBroker, block_on, http, ws_upgrade};

/// A broker whose WebSocket connections run on their own reader and
/// writer.
fn lean(tune: impl FnOnce(&mut wharf::Config)) -> TestBroker {
    TestBroker::start(|c| {
        c.server.lean_websockets = true;
        tune(c);
    })
}

/// A masked client text frame (zero mask key), payload under 126 bytes.
fn text_frame(payload: &str) -> Vec<u8> {
    let mut f = vec![0x81, 0x80 | payload.len() as u8, 0, 0, 0, 0];
    f.extend_from_slice(payload.as_bytes());
    f
}

/// Reads one server frame: (opcode, payload).
fn read_frame(t: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut head = [0u8; 2];
    t.read_exact(&mut head).expect("a frame header");
    let len = match head[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            t.read_exact(&mut l).unwrap();
            u16::from_be_bytes(l) as usize
        }
        127 => {
            let mut l = [0u8; 8];
            t.read_exact(&mut l).unwrap();
            u64::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    t.read_exact(&mut payload).expect("a frame payload");
    (head[0] & 0x0f, payload)
}

/// Reads a whole response that ends with the connection: head and body.
fn read_to_close(t: &mut TcpStream) -> String {
    let mut all = Vec::new();
    t.read_to_end(&mut all)
        .expect("the server closes the connection");
    String::from_utf8_lossy(&all).into_owned()
}

#[test]
fn frames_sent_with_the_upgrade_request_are_answered() {
    let b = lean(|_| {});
    let mut t = TcpStream::connect(b.addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The request and two frames in one write: the frames reach the
    // server's read buffer with the request head, before any 101.
    let mut bytes = format!(
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        b.addr
    )
    .into_bytes();
    bytes.extend(text_frame(r#"{"op":"ping","rid":7}"#));
    bytes.extend(text_frame(r#"{"op":"ping","rid":8}"#));
    t.write_all(&bytes).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        t.read_exact(&mut byte).expect("a response head");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for rid in [7, 8] {
        let (opcode, payload) = read_frame(&mut t);
        let reply: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        assert_eq!((opcode, reply["op"].as_str()), (1, Some("pong")), "{reply}");
        assert_eq!(reply["rid"], rid, "{reply}");
    }
    // And the connection goes on as any other.
    t.write_all(&text_frame(r#"{"op":"ping","rid":9}"#))
        .unwrap();
    let (_, payload) = read_frame(&mut t);
    assert!(String::from_utf8_lossy(&payload).contains(r#""rid":9"#));
}

#[test]
fn refused_upgrades_answer_json_and_close() {
    let b = lean(|c| {
        c.server.allowed_origins = vec!["https://app.example".into()];
    });
    // A handshake error (no Sec-WebSocket-Version).
    let mut t = TcpStream::connect(b.addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        t,
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        b.addr
    )
    .unwrap();
    let all = read_to_close(&mut t);
    assert!(all.starts_with("HTTP/1.1 400"), "{all}");
    assert!(
        all.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{all}"
    );
    let body = all.split("\r\n\r\n").nth(1).unwrap_or_default();
    let body: serde_json::Value = serde_json::from_str(body).expect(&all);
    let e = &body["error"];
    assert_eq!(e["code"], "websocket_handshake", "{body}");
    assert!(e["message"].is_string(), "{body}");

    // An origin the config does not allow.
    let (mut t, head) = ws_upgrade(b.addr, "/ws", "Origin: https://evil.example\r\n");
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let rest = read_to_close(&mut t);
    assert!(rest.contains("\"code\""), "{rest}");

    // No such route.
    let (mut t, head) = ws_upgrade(b.addr, "/nowhere", "");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    read_to_close(&mut t);

    // The broker is unharmed: an allowed origin is upgraded.
    let (_t, head) = ws_upgrade(b.addr, "/ws", "Origin: https://app.example\r\n");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
}

#[test]
fn other_upgrade_requests_get_their_route_answer_then_close() {
    let b = lean(|_| {});
    let mut t = TcpStream::connect(b.addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // What curl --http2 sends to a plain-text server.
    write!(
        t,
        "GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\n\
         Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
    )
    .unwrap();
    let all = read_to_close(&mut t);
    assert!(all.starts_with("HTTP/1.1 200"), "{all}");
    assert!(all.contains("\"status\""), "{all}");
    // Plain requests on other connections are untouched by the hook.
    let (status, body) = http(b.addr, "GET", "/health", "");
    assert_eq!(status, 200, "{body}");
}

#[test]
fn lean_connections_carry_bursts_and_large_messages_both_ways() {
    bursts_and_large_messages_both_ways(true);
}

#[test]
fn actix_http_connections_carry_bursts_and_large_messages_both_ways() {
    bursts_and_large_messages_both_ways(false);
}

/// Two clients (JSON and bincode) each get a burst of small messages in
/// order and one large message, on lean connections or actix-http's.
fn bursts_and_large_messages_both_ways(lean_websockets: bool) {
    let b = TestBroker::start(|c| {
        c.server.lean_websockets = lean_websockets;
        c.session.max_frame = 1 << 20;
    });
    block_on(async {
        let opts = |format| ClientOptions {
            format,
            ..ClientOptions::default()
        };
        let json = Client::connect(&b.ws_url(), opts(Format::Json))
            .await
            .unwrap();
        let bin = Client::connect(&b.ws_url(), opts(Format::Bincode))
            .await
            .unwrap();
        let mut at_json = json.subscribe("burst/#").await.unwrap();
        let mut at_bin = bin.subscribe("burst/#").await.unwrap();
        // A burst of small messages (many per read and per write), then
        // one that spans many reads and writes.
        for i in 0..2000u32 {
            bin.publish("burst/small", i.to_be_bytes().to_vec())
                .await
                .unwrap();
        }
        // The broker has taken every one of them (it answers a ping after
        // the frames before it) before the other connection publishes:
        // two connections' messages have no order between them.
        bin.ping().await.unwrap();
        let large: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        json.publish_confirmed("burst/large", large.clone())
            .await
            .unwrap();
        for sub in [&mut at_json, &mut at_bin] {
            for i in 0..2000u32 {
                let m = sub
                    .recv_timeout(Duration::from_secs(10))
                    .await
                    .expect("a message");
                assert_eq!(m.payload, i.to_be_bytes(), "in order, none lost");
            }
            let m = sub
                .recv_timeout(Duration::from_secs(10))
                .await
                .expect("the large one");
            assert_eq!(
                (m.topic.as_str(), m.payload.len()),
                ("burst/large", large.len())
            );
            assert!(m.payload == large);
        }
    });
}

/// Handed-over WebSockets leave actix-server's connection count (their
/// HTTP dispatcher ends at the 101, so that it does not sit in every idle
/// connection), so the server counts them: past `[server]
/// max_connections` an upgrade is refused with 503 `overloaded` and a
/// JSON body, the connections already open keep working, and once one
/// closes there is room again.
#[test]
fn handed_over_websockets_are_held_to_max_connections() {
    let b = lean(|c| c.server.max_connections = 3);
    let open: Vec<TcpStream> = (0..3)
        .map(|i| {
            let (t, head) = ws_upgrade(b.addr, "/ws", "");
            assert!(head.starts_with("HTTP/1.1 101"), "connection {i}: {head}");
            t
        })
        .collect();
    let (mut refused, head) = ws_upgrade(b.addr, "/ws", "");
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let mut body = String::new();
    let _ = refused.read_to_string(&mut body);
    assert!(body.contains(r#""code":"overloaded""#), "{body}");
    assert!(body.contains("max_connections"), "{body}");
    // The ones open are served.
    let mut first = open.into_iter();
    let mut t = first.next().expect("three open");
    t.write_all(&text_frame(r#"{"op":"ping","rid":7}"#))
        .unwrap();
    let mut reply = [0u8; 2];
    t.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], 0x81, "a text frame answers the ping");
    // One closes: an upgrade is let in again (the count drops when the
    // server has seen the close).
    drop(t);
    assert!(
        crate::common::wait_until(Duration::from_secs(10), || {
            ws_upgrade(b.addr, "/ws", "").1.starts_with("HTTP/1.1 101")
        }),
        "room again once a connection closed"
    );
}
