//! Bad input over a real WebSocket: each class gets its error code and the
//! connection keeps working; unrecoverable violations close only that
//! connection, with the right close code.

use crate::common;

use std::time::Duration;

use awc::ws;
use bytes::Bytes;
use common::{TestBroker, block_on, http, wait_until};
use futures_util::{SinkExt, StreamExt};
use wharf::client::{Client, ClientOptions};
use wharf::protocol::Format;

type Conn = actix_codec::Framed<awc::BoxedSocket, ws::Codec>;

async fn raw(b: &TestBroker) -> Conn {
    let (_, conn) = awc::Client::new()
        .ws(b.ws_url())
        .max_frame_size(1 << 24)
        .connect()
        .await
        .expect("websocket connect");
    conn
}

/// The next text frame as JSON, skipping pings; `None` on close or timeout.
async fn next_json(conn: &mut Conn) -> Option<serde_json::Value> {
    loop {
        let frame = actix_rt::time::timeout(Duration::from_secs(5), conn.next())
            .await
            .ok()??;
        match frame.ok()? {
            ws::Frame::Text(t) => return serde_json::from_slice(&t).ok(),
            ws::Frame::Binary(b) => {
                let f = wharf::protocol::decode_server(Format::Bincode, &b).ok()?;
                return serde_json::to_value(f).ok();
            }
            ws::Frame::Ping(_) | ws::Frame::Pong(_) => continue,
            _ => return None,
        }
    }
}

/// Waits for the server's close frame and returns its code.
async fn close_code(conn: &mut Conn) -> Option<u16> {
    loop {
        let frame = actix_rt::time::timeout(Duration::from_secs(5), conn.next())
            .await
            .ok()??;
        match frame.ok()? {
            ws::Frame::Close(reason) => return reason.map(|r| u16::from(r.code)),
            _ => continue,
        }
    }
}

async fn send_text(conn: &mut Conn, text: &str) {
    conn.send(ws::Message::Text(text.into())).await.unwrap();
}

async fn expect_error(conn: &mut Conn, text: &str, code: &str) {
    send_text(conn, text).await;
    let reply = next_json(conn)
        .await
        .unwrap_or_else(|| panic!("no reply to {text}"));
    assert_eq!(reply["op"], "error", "{text} -> {reply}");
    assert_eq!(reply["code"], code, "{text} -> {reply}");
}

async fn still_works(conn: &mut Conn) {
    send_text(conn, r#"{"op":"ping","rid":99}"#).await;
    let pong = next_json(conn).await.expect("pong");
    assert_eq!(pong, serde_json::json!({"op":"pong","rid":99}));
}

#[test]
fn each_class_of_bad_input_gets_its_error_and_the_connection_stays_open() {
    let b = TestBroker::start(|c| c.session.max_payload = 1024);
    block_on(async {
        let mut conn = raw(&b).await;
        let big = "x".repeat(2000);
        let cases = [
            ("not json at all", "malformed"),
            ("[1,2]", "malformed"),
            (r#"{"op":"teleport"}"#, "unknown_op"),
            (r#"{"op":"publish","payload":"x"}"#, "missing_field"),
            (
                r#"{"op":"publish","topic":7,"payload":"x"}"#,
                "invalid_field",
            ),
            (
                r#"{"op":"subscribe","id":"a","filter":"x","colour":1}"#,
                "invalid_field",
            ),
            (
                r#"{"op":"publish","topic":"a/+","payload":"x"}"#,
                "invalid_topic",
            ),
            (
                r#"{"op":"publish","topic":"","payload":"x"}"#,
                "invalid_topic",
            ),
            (
                r#"{"op":"subscribe","id":"a","filter":"a/#/b"}"#,
                "invalid_filter",
            ),
            (
                r#"{"op":"unsubscribe","id":"never"}"#,
                "unknown_subscription",
            ),
        ];
        for (text, code) in cases {
            expect_error(&mut conn, text, code).await;
        }
        expect_error(
            &mut conn,
            &format!(r#"{{"op":"publish","topic":"t","payload":"{big}","rid":5}}"#),
            "payload_too_large",
        )
        .await;
        send_text(&mut conn, r#"{"op":"subscribe","id":"a","filter":"t"}"#).await;
        expect_error(
            &mut conn,
            r#"{"op":"subscribe","id":"a","filter":"u"}"#,
            "duplicate_subscription",
        )
        .await;
        expect_error(&mut conn, r#"{"op":"hello"}"#, "unexpected_hello").await;
        // Bincode garbage in a binary frame.
        conn.send(ws::Message::Binary(Bytes::from_static(&[200, 1, 2])))
            .await
            .unwrap();
        let reply = next_json(&mut conn).await.unwrap();
        assert_eq!(reply["op"], "error");
        assert_eq!(reply["code"], "unknown_op");
        still_works(&mut conn).await;
    });
}

#[test]
fn errors_carry_the_request_id_they_answer() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let mut conn = raw(&b).await;
        send_text(
            &mut conn,
            r#"{"op":"publish","topic":"a/#","payload":"x","rid":41}"#,
        )
        .await;
        let reply = next_json(&mut conn).await.unwrap();
        assert_eq!(reply["rid"], 41);
        send_text(
            &mut conn,
            r#"{"op":"publish","topic":"ok","payload":"x","rid":42}"#,
        )
        .await;
        assert_eq!(
            next_json(&mut conn).await.unwrap(),
            serde_json::json!({"op":"receipt","rid":42})
        );
    });
}

/// Sends `text` and returns the error frame answering it.
async fn error_for(conn: &mut Conn, message: ws::Message) -> serde_json::Value {
    conn.send(message).await.unwrap();
    let reply = next_json(conn).await.expect("a reply");
    assert_eq!(reply["op"], "error", "{reply}");
    reply
}

#[test]
fn decode_errors_carry_the_rid_and_name_the_op_and_field() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let mut conn = raw(&b).await;
        let text = |t: &str| ws::Message::Text(t.into());
        let e = error_for(&mut conn, text(r#"{"op":"publish","payload":"x","rid":4}"#)).await;
        assert_eq!(e["code"], "missing_field", "{e}");
        assert_eq!(e["rid"], 4, "{e}");
        assert_eq!(e["message"], "publish: missing field `topic`", "{e}");
        let e = error_for(&mut conn, text(r#"{"op":"nope","rid":3}"#)).await;
        assert_eq!(e["code"], "unknown_op", "{e}");
        assert_eq!(e["rid"], 3, "{e}");
        let e = error_for(
            &mut conn,
            text(r#"{"op":"publish","topic":5,"payload":"x","rid":7}"#),
        )
        .await;
        assert_eq!(e["code"], "invalid_field", "{e}");
        assert_eq!(e["rid"], 7, "{e}");
        assert_eq!(
            e["message"], "topic: invalid type: integer `5`, expected a string",
            "{e}"
        );
        // Not JSON: nothing to recover, so no rid.
        let e = error_for(&mut conn, text(r#"{"op":"ping","rid":8"#)).await;
        assert_eq!(e["code"], "malformed", "{e}");
        assert!(e.get("rid").is_none(), "{e}");
        still_works(&mut conn).await;
    });
}

#[test]
fn bincode_errors_read_as_sentences_and_json_in_binary_frames_is_named() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let mut conn = raw(&b).await;
        let e = error_for(&mut conn, ws::Message::Binary(Bytes::from_static(&[99]))).await;
        assert_eq!(e["code"], "unknown_op", "{e}");
        assert_eq!(
            e["message"], "no operation has tag 99 (tags run from 0 to 23)",
            "{e}"
        );
        // publish (tag 3), topic "t", then a payload announcing 50 bytes.
        let e = error_for(
            &mut conn,
            ws::Message::Binary(Bytes::from_static(&[3, 1, b't', 50, b'x'])),
        )
        .await;
        assert_eq!(e["code"], "malformed", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.starts_with("publish: the frame ends early"), "{e}");
        let e = error_for(
            &mut conn,
            ws::Message::Binary(Bytes::from_static(
                br#"{"op":"publish","topic":"t","payload":"x","rid":21}"#,
            )),
        )
        .await;
        assert_eq!(e["code"], "malformed", "{e}");
        assert_eq!(e["rid"], 21, "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.starts_with("this binary frame holds JSON"), "{e}");
        still_works(&mut conn).await;
    });
}

#[test]
fn a_frame_over_max_frame_closes_with_1009_and_only_that_connection() {
    let b = TestBroker::start(|c| {
        c.session.max_frame = 4096;
        c.session.max_payload = 1024;
    });
    block_on(async {
        let mut other = raw(&b).await;
        let mut conn = raw(&b).await;
        conn.send(ws::Message::Binary(Bytes::from(vec![0u8; 10_000])))
            .await
            .unwrap();
        assert_eq!(close_code(&mut conn).await, Some(1009));
        still_works(&mut other).await;
    });
}

#[test]
fn a_flooding_client_is_told_then_closed_with_1008() {
    let b = TestBroker::start(|c| {
        c.session.rate_per_s = 50;
        c.session.rate_burst = 50;
    });
    block_on(async {
        let mut other = raw(&b).await;
        let mut conn = raw(&b).await;
        for _ in 0..300 {
            if conn
                .send(ws::Message::Text(r#"{"op":"ping"}"#.into()))
                .await
                .is_err()
            {
                break;
            }
        }
        let mut rate_limited = 0;
        let code = loop {
            let frame = actix_rt::time::timeout(Duration::from_secs(5), conn.next())
                .await
                .expect("the server answers")
                .expect("a frame")
                .expect("a valid frame");
            match frame {
                ws::Frame::Text(t) => {
                    let v: serde_json::Value = serde_json::from_slice(&t).unwrap();
                    if v["code"] == "rate_limited" {
                        rate_limited += 1;
                    }
                }
                ws::Frame::Close(reason) => break reason.map(|r| u16::from(r.code)),
                _ => {}
            }
        };
        assert!(rate_limited > 0, "told before being closed");
        assert_eq!(code, Some(1008));
        still_works(&mut other).await;
    });
}

#[test]
fn disconnect_policy_closes_a_slow_consumer_with_1008() {
    let b = TestBroker::start(|c| {
        c.session.outbound_limit = 4 * 1024 * 1024;
        c.session.max_frame = 8 * 1024;
        c.session.max_payload = 8 * 1024;
        c.session.slow_consumer = wharf::config::SlowConsumer::Disconnect;
    });
    block_on(async {
        // Subscribe on a raw connection and never read it.
        let mut slow = raw(&b).await;
        send_text(
            &mut slow,
            r#"{"op":"subscribe","id":"s","filter":"big","rid":1}"#,
        )
        .await;
        assert_eq!(next_json(&mut slow).await.unwrap()["op"], "receipt");
        // A reading subscriber on its own thread keeps up throughout.
        let url = b.ws_url();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let fast = std::thread::spawn(move || {
            block_on(async move {
                let fast = Client::connect(&url, ClientOptions::default())
                    .await
                    .unwrap();
                let mut sub = fast.subscribe("big").await.unwrap();
                ready_tx.send(()).unwrap();
                let mut got = 0;
                while got < 3000 && sub.recv_timeout(Duration::from_secs(10)).await.is_some() {
                    got += 1;
                }
                fast.ping().await.map(|_| got)
            })
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        let publisher = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        // 12 MB in all, confirmed every 10 messages: the slow session passes
        // its 4 MB limit; a reader lagging less than 1000 messages does not.
        for i in 0..3000 {
            if i % 10 == 9 {
                publisher
                    .publish_confirmed("big", vec![1u8; 4000])
                    .await
                    .unwrap();
            } else {
                publisher.publish("big", vec![1u8; 4000]).await.unwrap();
            }
        }
        publisher.ping().await.unwrap();
        assert_eq!(
            fast.join().unwrap(),
            Ok(3000),
            "the reading subscriber is unaffected"
        );
        // The slow one finds, after whatever was in flight, a 1008 close.
        let mut code = None;
        for _ in 0..5000 {
            match actix_rt::time::timeout(Duration::from_secs(5), slow.next()).await {
                Ok(Some(Ok(ws::Frame::Close(reason)))) => {
                    code = reason.map(|r| u16::from(r.code));
                    break;
                }
                Ok(Some(Ok(_))) => continue,
                _ => break,
            }
        }
        assert_eq!(code, Some(1008));
    });
}

#[test]
fn close_with_drain_delivers_what_was_queued() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let sub = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        let mut s = sub.subscribe("d").await.unwrap();
        let publisher = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        for i in 0..200u32 {
            publisher
                .publish_confirmed("d", i.to_be_bytes().to_vec())
                .await
                .unwrap();
        }
        sub.close(true).await.unwrap();
        let mut got = 0u32;
        while let Some(m) = s.recv().await {
            assert_eq!(m.payload, got.to_be_bytes());
            got += 1;
        }
        assert_eq!(got, 200);
    });
}

#[test]
fn http_publish_reaches_websocket_subscribers_with_headers() {
    let b = TestBroker::start(|c| c.session.max_payload = 100);
    block_on(async {
        let c = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        let mut s = c.subscribe("http/+").await.unwrap();
        let addr = b.addr;
        let (status, body) = actix_web::rt::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut t = std::net::TcpStream::connect(addr).unwrap();
            write!(
                t,
                "POST /topics/http/in?retain=true HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nX-Wharf-Source: curl\r\nContent-Length: 5\r\n\r\nhello"
            )
            .unwrap();
            let mut out = String::new();
            t.read_to_string(&mut out).unwrap();
            let (head, body) = out.split_once("\r\n\r\n").unwrap();
            (head.split_whitespace().nth(1).unwrap().to_owned(), body.to_owned())
        })
        .await
        .unwrap();
        assert_eq!(status, "202", "{body}");
        let reply: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(reply["delivered"], 1);
        let m = s.recv_timeout(Duration::from_secs(5)).await.unwrap();
        assert_eq!(m.payload, b"hello");
        assert_eq!(m.topic, "http/in");
        assert_eq!(m.headers.get("source").map(String::as_str), Some("curl"));
    });
    let (status, body) = http(b.addr, "POST", "/topics/a/%2B", "x");
    assert_eq!(status, 400);
    assert!(body.contains("invalid_topic"), "{body}");
    let (status, body) = http(b.addr, "POST", "/topics/a?retain=maybe", "x");
    assert_eq!(status, 400, "{body}");
    let (status, body) = http(b.addr, "POST", "/topics/a", &"x".repeat(101));
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("payload_too_large"));
    let (status, _) = http(b.addr, "GET", "/topics/a", "");
    assert_eq!(status, 405);
}

#[test]
fn a_silent_connection_is_closed_with_1001_after_the_idle_timeout() {
    let b = TestBroker::start(|c| {
        c.session.ping_interval_s = 1;
        c.session.idle_timeout_s = 2;
    });
    block_on(async {
        let t0 = std::time::Instant::now();
        let mut conn = raw(&b).await;
        // Send nothing and answer no ping (this raw connection never
        // pongs): read until the broker closes.
        let mut code = None;
        while let Ok(Some(Ok(frame))) =
            actix_rt::time::timeout(Duration::from_secs(5), conn.next()).await
        {
            if let ws::Frame::Close(reason) = frame {
                code = reason.map(|r| u16::from(r.code));
                break;
            }
        }
        assert_eq!(code, Some(1001));
        let took = t0.elapsed();
        assert!(
            took >= Duration::from_secs(2),
            "closed before the idle timeout: {took:?}"
        );
    });
}

#[test]
fn shutdown_drains_sessions_and_closes_them_with_1001() {
    let b = TestBroker::start(|_| {});
    let url = b.ws_url();
    let (tx, rx) = std::sync::mpsc::channel();
    let client = std::thread::spawn(move || {
        block_on(async move {
            let (_, mut conn) = awc::Client::new().ws(&url).connect().await.unwrap();
            send_text(
                &mut conn,
                r#"{"op":"subscribe","id":"s","filter":"x","rid":1}"#,
            )
            .await;
            assert_eq!(next_json(&mut conn).await.unwrap()["op"], "receipt");
            tx.send(()).unwrap();
            close_code(&mut conn).await
        })
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap();
    b.stop().expect("clean stop");
    assert_eq!(client.join().unwrap(), Some(1001));
}

/// A tiny deterministic generator, so the storm below is reproducible.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = (self.next() as usize) % max;
        (0..len).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn a_storm_of_garbage_frames_hurts_nobody_else() {
    let b = TestBroker::start(|c| c.session.max_payload = 512);
    block_on(async {
        let ok = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        let mut sub = ok.subscribe("calm").await.unwrap();
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let ops = [
            "publish",
            "subscribe",
            "unsubscribe",
            "ping",
            "hello",
            "close",
            "x",
        ];
        for round in 0..20 {
            let mut conn = raw(&b).await;
            for _ in 0..50 {
                let frame = match rng.next() % 3 {
                    0 => ws::Message::Binary(Bytes::from(rng.bytes(300))),
                    1 => {
                        let op = ops[(rng.next() as usize) % ops.len()];
                        let junk = String::from_utf8_lossy(&rng.bytes(40)).into_owned();
                        let text = serde_json::json!({
                            "op": op, "topic": junk, "payload": junk, "id": junk,
                            "filter": junk, "rid": rng.next() % 5,
                        });
                        ws::Message::Text(text.to_string().into())
                    }
                    _ => ws::Message::Text(
                        String::from_utf8_lossy(&rng.bytes(100)).into_owned().into(),
                    ),
                };
                if conn.send(frame).await.is_err() {
                    break;
                }
            }
            // Whatever happened to that connection, the broker serves others.
            ok.publish_confirmed("calm", format!("round {round}").into_bytes())
                .await
                .unwrap();
            let m = sub
                .recv_timeout(Duration::from_secs(5))
                .await
                .expect("still delivering");
            assert_eq!(m.payload, format!("round {round}").into_bytes());
        }
    });
    assert_eq!(http(b.addr, "GET", "/health", "").0, 200);
}

#[test]
fn a_client_that_stops_reading_is_dropped_after_the_write_timeout() {
    let b = TestBroker::start(|c| {
        c.session.write_timeout_s = 2;
        c.session.outbound_limit = 256 << 20;
        c.session.max_frame = 1 << 20;
        c.session.max_payload = 1 << 20;
    });
    block_on(async {
        let mut stuck = raw(&b).await;
        send_text(
            &mut stuck,
            r#"{"op":"subscribe","id":"s","filter":"big","rid":1}"#,
        )
        .await;
        assert_eq!(next_json(&mut stuck).await.unwrap()["op"], "receipt");
        // Fill the kernel buffers both ways so its receive window closes.
        let publisher = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        for _ in 0..64 {
            publisher
                .publish_confirmed("big", vec![7u8; 512 * 1024])
                .await
                .unwrap();
        }
        let addr = b.addr;
        let gone = actix_web::rt::task::spawn_blocking(move || {
            wait_until(Duration::from_secs(30), || {
                let (_, body) = http(addr, "GET", "/admin/sessions", "");
                let list: serde_json::Value = serde_json::from_str(&body).unwrap();
                // Only the publisher remains.
                list.as_array().map_or(0, Vec::len) == 1
            })
        })
        .await
        .unwrap();
        assert!(gone, "the stuck session was not dropped");
        drop(stuck);
    });
}
