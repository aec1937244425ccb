//! Typed sockets through the example app (examples/typed_sockets.rs), on
//! an ephemeral loopback port, driven by a real WebSocket client (awc):
//! a customer tracks an order and hears of it as the warehouse's order
//! socket publishes; the app finds sockets by type and id, tells them
//! events and closes them; refusals, credentials, the rate limit and
//! invalid text are answered as documented.

use crate::common;

#[path = "../../examples/typed_sockets.rs"]
mod example;

use std::time::Duration;

use actix_web::web;
use awc::ws;
use common::{block_on, eventually, http_request};
use example::{CustomerSocket, OrderSocket, Shop};
use futures_util::{SinkExt, StreamExt};

type Conn = actix_codec::Framed<awc::BoxedSocket, ws::Codec>;

/// The example app on a free port: (shop, address, server handle).
async fn serve(
    tune: impl FnOnce(&mut wharf::Config),
    dir: &std::path::Path,
) -> (
    web::Data<Shop>,
    std::net::SocketAddr,
    actix_web::dev::ServerHandle,
) {
    let mut config = wharf::Config::default();
    config.store.data_dir = dir.join("data");
    config.scheduler.workers = 1;
    config.server.shutdown_timeout_s = 2;
    tune(&mut config);
    let shop = example::start(config).await.unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let routes = shop.clone();
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new().configure(|cfg| example::app(cfg, &routes))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    let handle = server.handle();
    actix_rt::spawn(server);
    (shop, addr, handle)
}

/// Stops as `wharf::serve` does: sessions first (open sockets would hold
/// a graceful HTTP stop for its whole timeout), then the server, then
/// the broker.
async fn stop(shop: &web::Data<Shop>, server: actix_web::dev::ServerHandle) {
    shop.wharf.sessions().close_all(1001, "shutting down", true);
    server.stop(true).await;
}

async fn connect(addr: std::net::SocketAddr, path: &str) -> Conn {
    let (_, conn) = awc::Client::new()
        .ws(format!("ws://{addr}{path}"))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {path}: {e}"));
    conn
}

/// The next text message, skipping pings; `None` on close or timeout.
async fn next_text(conn: &mut Conn) -> Option<String> {
    loop {
        let frame = actix_rt::time::timeout(Duration::from_secs(5), conn.next())
            .await
            .ok()??;
        match frame.ok()? {
            ws::Frame::Text(b) => return Some(String::from_utf8(b.to_vec()).unwrap()),
            ws::Frame::Close(_) => return None,
            _ => continue,
        }
    }
}

async fn close_code(conn: &mut Conn) -> Option<u16> {
    loop {
        let frame = actix_rt::time::timeout(Duration::from_secs(5), conn.next())
            .await
            .ok()??;
        if let ws::Frame::Close(reason) = frame.ok()? {
            return reason.map(|r| u16::from(r.code));
        }
    }
}

async fn say(conn: &mut Conn, text: &str) {
    conn.send(ws::Message::Text(text.into())).await.unwrap();
}

/// A request from a blocking thread (the server runs on this one).
async fn request(
    addr: std::net::SocketAddr,
    method: &'static str,
    path: &'static str,
    headers: &'static str,
    body: &'static str,
) -> (u16, String) {
    let (status, _, body) = actix_web::rt::task::spawn_blocking(move || {
        http_request(addr, method, path, headers, body)
    })
    .await
    .unwrap();
    (status, body)
}

#[test]
fn customers_and_orders_talk_through_their_typed_sockets() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async move {
        let (shop, addr, server) = serve(|_| {}, dir.path()).await;
        let customers = shop.wharf.sockets::<CustomerSocket>();

        let mut alice = connect(addr, "/customers/c1").await;
        assert_eq!(next_text(&mut alice).await.unwrap(), "welcome c1");
        say(&mut alice, "track o1").await;
        assert_eq!(next_text(&mut alice).await.unwrap(), "tracking o1");
        // The session manager finds her socket by type and id.
        assert!(eventually(Duration::from_secs(5), || customers.find("c1").len() == 1).await);
        let found = &customers.find("c1")[0];
        assert_eq!(
            (found.kind, found.client_id.as_str(), found.subscriptions),
            ("customer", "c1", 1)
        );
        assert!(customers.find("c2").is_empty());

        let mut terminal = connect(addr, "/orders/o1?customer=c1").await;
        say(&mut terminal, r#"{"status":"packed"}"#).await;
        let reply: serde_json::Value =
            serde_json::from_str(&next_text(&mut terminal).await.unwrap()).unwrap();
        assert_eq!(reply["subscribers"], 1, "{reply}");
        assert_eq!(reply["customer_sockets"], 1, "{reply}");
        // Alice hears twice: the app's notice (high lane) and the topic's
        // message frame, in either order.
        let heard = [
            next_text(&mut alice).await.unwrap(),
            next_text(&mut alice).await.unwrap(),
        ];
        let json = |i: usize| serde_json::from_str::<serde_json::Value>(&heard[i]).unwrap();
        let (notice, message) = if heard[0].contains("notice") {
            (json(0), json(1))
        } else {
            (json(1), json(0))
        };
        assert_eq!(notice["notice"], "order o1 is packed", "{heard:?}");
        assert_eq!(
            (
                &message["op"],
                &message["sub"],
                &message["topic"],
                &message["payload"]
            ),
            (
                &"message".into(),
                &"orders/o1/status".into(),
                &"orders/o1/status".into(),
                &"packed".into()
            ),
            "{message}"
        );

        // The app's own route tells the customer's sockets.
        let (status, body) = request(addr, "POST", "/customers/c1/notify", "", "your coupon").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body, r#"{"refused":0,"sockets":1}"#);
        let notice: serde_json::Value =
            serde_json::from_str(&next_text(&mut alice).await.unwrap()).unwrap();
        assert_eq!(notice["notice"], "your coupon");
        // Sending straight to the client, and to a customer with no socket.
        assert_eq!(customers.send("c1", "hello from the app").sockets, 1);
        assert_eq!(next_text(&mut alice).await.unwrap(), "hello from the app");
        assert_eq!(customers.send("nobody", "x"), Default::default());

        // The broker's admin view lists both kinds.
        let (status, body) = request(addr, "GET", "/broker/admin/sessions", "", "").await;
        assert_eq!(status, 200, "{body}");
        let kinds: Vec<String> = serde_json::from_str::<serde_json::Value>(&body)
            .unwrap()
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| s["kind"].as_str().unwrap().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            kinds.contains(&"customer".into()) && kinds.contains(&"order".into()),
            "{body}"
        );
        assert_eq!(shop.wharf.sockets::<OrderSocket>().list().len(), 1);

        // Untracking ends the subscription: the next update reaches
        // only the notice.
        say(&mut alice, "untrack o1").await;
        assert_eq!(next_text(&mut alice).await.unwrap(), "stopped tracking o1");
        say(&mut terminal, r#"{"status":"shipped"}"#).await;
        let reply: serde_json::Value =
            serde_json::from_str(&next_text(&mut terminal).await.unwrap()).unwrap();
        assert_eq!(reply["subscribers"], 0, "{reply}");

        // The app closes her socket by id; on_close runs, the registry
        // forgets her.
        assert_eq!(customers.close("c1", 4000, "store closing"), 1);
        let code = close_code(&mut alice).await;
        assert_eq!(code, Some(4000));
        assert!(eventually(Duration::from_secs(5), || customers.find("c1").is_empty()).await);
        assert!(
            eventually(Duration::from_secs(5), || {
                shop.closed.lock().unwrap().as_slice() == ["customer c1 closed (Some(4000))"]
            })
            .await,
            "{:?}",
            shop.closed.lock().unwrap()
        );
        stop(&shop, server).await;
        shop.wharf.shutdown().await.unwrap();
    });
}

#[test]
fn bad_upgrades_are_refused_with_json_and_bad_input_closes_only_that_socket() {
    let dir = tempfile::tempdir().unwrap();
    block_on(async move {
        let (shop, addr, server) = serve(
            |c| {
                c.session.rate_per_s = 5;
                c.session.rate_burst = 5;
            },
            dir.path(),
        )
        .await;
        // on_open's refusal: the status and JSON body it chose.
        let (status, body) = refused_upgrade(addr, "/orders/o1").await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains(r#""code":"invalid_field""#), "{body}");
        // Not an upgrade, or not GET.
        let (status, body) = request(addr, "GET", "/customers/c1", "", "").await;
        assert!(status == 426 || status == 400, "{status} {body}");
        assert!(body.contains("websocket"), "{body}");
        let (status, _) = request(addr, "POST", "/customers/c1", "", "").await;
        assert_eq!(status, 405);

        // Invalid UTF-8 in a text frame closes that socket with 1007
        // (a raw client: awc would not send it).
        let mut other = connect(addr, "/customers/c2").await;
        assert_eq!(next_text(&mut other).await.unwrap(), "welcome c2");
        let code = actix_web::rt::task::spawn_blocking(move || invalid_text_close(addr))
            .await
            .unwrap();
        assert_eq!(code, Some(1007));
        let mut bad = connect(addr, "/customers/c3").await;
        assert_eq!(next_text(&mut bad).await.unwrap(), "welcome c3");
        bad.send(ws::Message::Binary(bytes::Bytes::from_static(b"binary")))
            .await
            .unwrap();
        assert_eq!(next_text(&mut bad).await.unwrap(), "customers speak text");

        // Far past the rate, a socket is closed with 1008; the other one
        // carries on.
        let mut flood = connect(addr, "/customers/c4").await;
        assert_eq!(next_text(&mut flood).await.unwrap(), "welcome c4");
        for _ in 0..200 {
            if flood
                .send(ws::Message::Text("nonsense".into()))
                .await
                .is_err()
            {
                break;
            }
        }
        let closed = close_code(&mut flood).await;
        assert_eq!(closed, Some(1008));
        say(&mut other, "track o9").await;
        assert_eq!(next_text(&mut other).await.unwrap(), "tracking o9");
        stop(&shop, server).await;
        shop.wharf.shutdown().await.unwrap();
    });
}

/// A WebSocket upgrade the server refuses: (status, JSON body).
async fn refused_upgrade(addr: std::net::SocketAddr, path: &'static str) -> (u16, String) {
    use std::io::Read;
    actix_web::rt::task::spawn_blocking(move || {
        let (mut t, head) = common::ws_upgrade(addr, path, "");
        let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; len];
        t.read_exact(&mut body).unwrap();
        (status, String::from_utf8(body).unwrap())
    })
    .await
    .unwrap()
}

/// Opens a customer socket over a raw TCP stream, sends a text frame
/// that is not UTF-8, and returns the close code the server answers.
fn invalid_text_close(addr: std::net::SocketAddr) -> Option<u16> {
    use std::io::{Read, Write};
    let (mut t, head) = common::ws_upgrade(addr, "/customers/c5", "");
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mask = [1u8, 2, 3, 4];
    let payload = [0xffu8, 0xfe];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    t.write_all(&frame).unwrap();
    // Server frames are unmasked with short payloads here: walk them.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let mut at = 0;
        while buf.len() >= at + 2 {
            let len = usize::from(buf[at + 1] & 0x7f);
            if buf.len() < at + 2 + len {
                break;
            }
            if buf[at] & 0x0f == 0x8 {
                return (len >= 2).then(|| u16::from_be_bytes([buf[at + 2], buf[at + 3]]));
            }
            at += 2 + len;
        }
        match t.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[test]
fn typed_sockets_take_credentials_and_permissions() {
    const TOKEN: &str = "customer-token-for-tests";
    let dir = tempfile::tempdir().unwrap();
    block_on(async move {
        let (shop, addr, server) = serve(
            |c| {
                c.auth.tokens.push(wharf::config::auth::TokenConfig {
                    name: "c1".into(),
                    token_sha256: wharf::auth::token_digest(TOKEN),
                    allow: wharf::config::auth::Permissions {
                        subscribe: vec!["orders/o1/#".into()],
                        ..Default::default()
                    },
                });
            },
            dir.path(),
        )
        .await;
        // No credentials, no anonymous access: 401 before on_open.
        let (status, body) = refused_upgrade(addr, "/customers/c1").await;
        assert_eq!(status, 401, "{body}");
        assert!(body.contains(r#""code":"unauthorized""#), "{body}");
        assert!(shop.wharf.sockets::<CustomerSocket>().list().is_empty());

        // With the token: in, and held to its permissions.
        let mut alice = connect(addr, &format!("/customers/c1?token={TOKEN}")).await;
        assert_eq!(next_text(&mut alice).await.unwrap(), "welcome c1");
        say(&mut alice, "track o1").await;
        assert_eq!(next_text(&mut alice).await.unwrap(), "tracking o1");
        say(&mut alice, "track o2").await;
        let refused = next_text(&mut alice).await.unwrap();
        assert!(
            refused.starts_with("cannot track o2") && refused.contains("may not subscribe"),
            "{refused}"
        );
        // The order socket's publish is checked too: c1 may not publish.
        let mut terminal = connect(addr, &format!("/orders/o1?customer=c1&token={TOKEN}")).await;
        say(&mut terminal, r#"{"status":"packed"}"#).await;
        let reply = next_text(&mut terminal).await.unwrap();
        assert!(reply.contains("may not publish"), "{reply}");
        stop(&shop, server).await;
        shop.wharf.shutdown().await.unwrap();
    });
}
