//! Authentication and permissions over real sockets: one table of
//! (principal, operation, expected answer) rows run over every endpoint
//! that has the operation (native JSON, native bincode, MQTT, HTTP), then
//! the ways authentication fails (bad, missing and rate-limited
//! credentials), JWT expiry and refresh, anonymous access, and MQTT client
//! ids per principal.
//!
//! The tests at the end reproduce bugs found while writing these (a
//! fractional `exp`, a worker for every kind, MQTT persistent sessions
//! and the consume right, resumed subscriptions): they failed before the
//! fixes.

use crate::common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use awc::ws;
use base64::Engine as _;
use common::{TestBroker, block_on};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use wharf::client::mqtt::{MqttClient, MqttOptions};
use wharf::client::{Client, ClientError, ClientOptions};
use wharf::config::auth::{JwtKeyConfig, Permissions, TokenConfig, UserConfig};
use wharf::protocol::jobs::NewJob;
use wharf::protocol::{ErrorCode, Format};

/// How long any single answer may take.
const WAIT: Duration = Duration::from_secs(5);
const ALICE_PASSWORD: &str = "alice-password";
const SVC_TOKEN: &str = "svc-token";
const ROOT_TOKEN: &str = "root-token";
const JWT_SECRET: &str = "an-hs256-secret-of-more-than-32-bytes";
/// The `sub` of the matrix's JWTs.
const JWT_SUB: &str = "device-7";
const ENTITY: &str = "0190a6f0-0000-7000-8000-000000000001";

// ---------------------------------------------------------------------
// Principals and the broker's [auth]
// ---------------------------------------------------------------------

/// alice's argon2id hash, made once per test process (each hash costs
/// a few hundred milliseconds in a debug build).
fn alice_hash() -> String {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| wharf::auth::hash_password(ALICE_PASSWORD.as_bytes()).unwrap())
        .clone()
}

fn list(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The principals of every test: the user alice, the tokens svc and root,
/// and HS256 JWTs.
fn configure(c: &mut wharf::Config) {
    c.auth.users.push(UserConfig {
        name: "alice".into(),
        password_hash: alice_hash(),
        allow: Permissions {
            publish: list(&["home/%u/#"]),
            subscribe: list(&["home/+/temp"]),
            ..Permissions::default()
        },
    });
    c.auth.tokens.push(TokenConfig {
        name: "svc".into(),
        token_sha256: wharf::auth::token_digest(SVC_TOKEN),
        allow: Permissions {
            enqueue: list(&["orders"]),
            consume: list(&["orders"]),
            enqueue_jobs: list(&["email"]),
            work_jobs: list(&["email"]),
            ..Permissions::default()
        },
    });
    c.auth.tokens.push(TokenConfig {
        name: "root".into(),
        token_sha256: wharf::auth::token_digest(ROOT_TOKEN),
        allow: Permissions::everything(),
    });
    c.auth.jwt.keys.push(JwtKeyConfig {
        algorithm: "HS256".into(),
        secret: JWT_SECRET.into(),
        ..JwtKeyConfig::default()
    });
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An HS256 JWT for `sub` expiring at `exp` (Unix seconds) whose `wharf`
/// claim is `rights`.
fn jwt(sub: &str, exp: u64, rights: Value) -> String {
    let claims = json!({"sub": sub, "exp": exp, "wharf": rights});
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap()
}

/// The matrix's JWT rights: subscribe and (for durable subscriptions)
/// consume under `cmd/`.
fn jwt_rights() -> Value {
    json!({"subscribe": ["cmd/#"], "consume": ["cmd/#"]})
}

fn basic(user: &str, password: &str) -> String {
    let raw = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// A user: password only (HTTP Basic, MQTT, Basic on the upgrade).
    Alice,
    /// A static token.
    Svc,
    /// A static token with every right.
    Root,
    /// A JWT with `jwt_rights()`.
    Jwt,
}

use Who::{Alice, Jwt, Root, Svc};

const EVERYONE: [Who; 4] = [Alice, Svc, Root, Jwt];

/// The credentials each principal presents.
struct Credentials {
    jwt: String,
}

impl Credentials {
    fn new() -> Credentials {
        Credentials {
            jwt: jwt(JWT_SUB, unix_now() + 600, jwt_rights()),
        }
    }

    /// The token for `hello`; alice has none.
    fn token(&self, who: Who) -> Option<String> {
        match who {
            Alice => None,
            Svc => Some(SVC_TOKEN.into()),
            Root => Some(ROOT_TOKEN.into()),
            Jwt => Some(self.jwt.clone()),
        }
    }

    /// The `Authorization` header value.
    fn authorization(&self, who: Who) -> String {
        match self.token(who) {
            Some(t) => bearer(&t),
            None => basic("alice", ALICE_PASSWORD),
        }
    }

    /// MQTT CONNECT's user name and password (a token's user name is
    /// ignored).
    fn mqtt(&self, who: Who) -> (String, String) {
        match self.token(who) {
            Some(t) => ("ignored".into(), t),
            None => ("alice".into(), ALICE_PASSWORD.into()),
        }
    }
}

// ---------------------------------------------------------------------
// Raw native connections (JSON text frames, or bincode binary frames)
// ---------------------------------------------------------------------

type Conn = actix_codec::Framed<awc::BoxedSocket, ws::Codec>;

/// A native-protocol WebSocket driven frame by frame. Frames are written
/// as JSON; in bincode mode they are re-encoded with the library's codec
/// and sent as binary frames, and binary replies are decoded back to JSON
/// values, so one set of checks serves both encodings.
struct Native {
    conn: Conn,
    format: Format,
}

enum Incoming {
    Frame(Value),
    Closed(Option<u16>),
    Nothing,
}

impl Native {
    /// Opens `/ws` (with `query`, e.g. `?token=...`) offering the
    /// format's subprotocol, with `authorization` on the upgrade.
    async fn open(
        b: &TestBroker,
        format: Format,
        query: &str,
        authorization: Option<&str>,
    ) -> Native {
        let protocol = match format {
            Format::Json => "wharf.json",
            Format::Bincode => "wharf.bin",
        };
        let mut req = awc::Client::new()
            .ws(format!("{}{query}", b.ws_url()))
            .protocols([protocol]);
        if let Some(value) = authorization {
            req = req.header("authorization", value);
        }
        let (_, conn) = actix_rt::time::timeout(WAIT, req.connect())
            .await
            .expect("the upgrade is answered in time")
            .expect("the upgrade is accepted");
        Native { conn, format }
    }

    async fn send(&mut self, frame: &Value) {
        let text = frame.to_string();
        let message = match self.format {
            Format::Json => ws::Message::Text(text.into()),
            Format::Bincode => {
                let typed = wharf::protocol::decode_client(Format::Json, text.as_bytes())
                    .unwrap_or_else(|e| panic!("{text} is not a client frame: {e:?}"));
                let bytes = wharf::protocol::encode_client(Format::Bincode, &typed);
                ws::Message::Binary(bytes.into())
            }
        };
        self.conn.send(message).await.expect("send a frame");
    }

    /// The next data frame or the close, answering pings; `Nothing` if
    /// neither comes within `within`.
    async fn recv(&mut self, within: Duration) -> Incoming {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = match actix_rt::time::timeout(left, self.conn.next()).await {
                Err(_) => return Incoming::Nothing,
                Ok(None) | Ok(Some(Err(_))) => return Incoming::Closed(None),
                Ok(Some(Ok(f))) => f,
            };
            match frame {
                ws::Frame::Text(t) => {
                    return Incoming::Frame(serde_json::from_slice(&t).expect("JSON"));
                }
                ws::Frame::Binary(b) => {
                    let f = wharf::protocol::decode_server(Format::Bincode, &b).expect("bincode");
                    return Incoming::Frame(serde_json::to_value(f).unwrap());
                }
                ws::Frame::Close(reason) => {
                    return Incoming::Closed(reason.map(|r| u16::from(r.code)));
                }
                ws::Frame::Ping(p) => {
                    let _ = self.conn.send(ws::Message::Pong(p)).await;
                }
                _ => {}
            }
        }
    }

    /// The next frame that is not a delivery of a subscription or a queue.
    async fn reply(&mut self, within: Duration) -> Value {
        loop {
            match self.recv(within).await {
                Incoming::Frame(v) if matches!(v["op"].as_str(), Some("message" | "delivery")) => {}
                Incoming::Frame(v) => return v,
                Incoming::Closed(code) => panic!("closed ({code:?}) instead of a reply"),
                Incoming::Nothing => panic!("no reply within {within:?}"),
            }
        }
    }

    /// Waits for the server's close frame, skipping frames; its code.
    async fn close_code(&mut self, within: Duration) -> Option<u16> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv(left).await {
                Incoming::Frame(_) => {}
                Incoming::Closed(code) => return code,
                Incoming::Nothing => panic!("no close within {within:?}"),
            }
        }
    }

    /// `hello`, answered by `welcome`.
    async fn hello(&mut self, client_id: &str, token: Option<&str>) {
        let mut h = json!({"op": "hello", "client_id": client_id});
        if let Some(t) = token {
            h["token"] = json!(t);
        }
        self.send(&h).await;
        let w = self.reply(WAIT).await;
        assert_eq!(w["op"], "welcome", "{w}");
        assert_eq!(w["client_id"], client_id, "{w}");
    }

    /// A ping with `rid` is answered by its pong: the session is alive.
    async fn still_works(&mut self, rid: u64) {
        self.send(&json!({"op": "ping", "rid": rid})).await;
        let pong = self.reply(WAIT).await;
        assert_eq!(pong, json!({"op": "pong", "rid": rid}));
    }

    /// Sends `frame` and expects an `error` with `code` and `rid`, then a
    /// close with `close`.
    async fn refused(&mut self, frame: &Value, code: &str, close: u16) {
        self.send(frame).await;
        let e = self.reply(WAIT).await;
        assert_eq!(e["op"], "error", "{frame} -> {e}");
        assert_eq!(e["code"], code, "{frame} -> {e}");
        assert_eq!(
            e["rid"],
            frame.get("rid").cloned().unwrap_or(Value::Null),
            "{e}"
        );
        assert_eq!(self.close_code(WAIT).await, Some(close), "{frame}");
    }
}

// ---------------------------------------------------------------------
// HTTP with credentials, and raw upgrades
// ---------------------------------------------------------------------

struct HttpReply {
    status: u16,
    head: String,
    body: Value,
}

impl HttpReply {
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn code(&self) -> &Value {
        &self.body["error"]["code"]
    }
}

/// One HTTP/1.1 exchange with an optional `Authorization` header.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: &str,
) -> HttpReply {
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let (status, head, body) = common::http_request(addr, method, path, &auth, body);
    HttpReply {
        status,
        head,
        body: serde_json::from_str(&body).unwrap_or(Value::Null),
    }
}

/// The response head to a WebSocket upgrade of `path` with `extra`
/// header lines.
fn upgrade_head(addr: SocketAddr, path: &str, extra: &str) -> String {
    common::ws_upgrade(addr, path, extra).1
}

fn status_of(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn mqtt_url(b: &TestBroker) -> String {
    format!("ws://{}/mqtt", b.addr)
}

fn mqtt_opts(client_id: &str, credentials: Option<(String, String)>) -> MqttOptions {
    MqttOptions {
        client_id: client_id.into(),
        credentials,
        timeout: WAIT,
        ..MqttOptions::default()
    }
}

/// The CONNACK code an MQTT connect was refused with.
async fn connack_refusal(b: &TestBroker, credentials: Option<(String, String)>) -> String {
    match MqttClient::connect(&mqtt_url(b), mqtt_opts("refused", credentials)).await {
        Ok(_) => panic!("the CONNECT was accepted"),
        Err(e) => e.to_string(),
    }
}

// ---------------------------------------------------------------------
// 1. The matrix
// ---------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Op {
    Publish(&'static str),
    Subscribe(&'static str),
    /// A durable subscription (native only): needs subscribe and consume.
    Durable(&'static str),
    Enqueue(&'static str),
    Consume(&'static str),
    /// A job of this kind.
    Job(&'static str),
    /// An HTTP-only route: method, path, and its status when allowed.
    Http(&'static str, &'static str, u16),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Allowed,
    /// Refused with this error code.
    Denied(&'static str),
}

use Expect::{Allowed, Denied};
use Op::{Consume, Durable, Enqueue, Http, Job, Publish, Subscribe};

const FORBIDDEN: Expect = Denied("forbidden");

/// Every row runs on every endpoint that has its operation. Before the
/// rows, root enqueues to `orders` and `scratch` (so both exist).
const ROWS: &[(Who, Op, Expect)] = &[
    // alice: publish home/%u/#, subscribe home/+/temp, nothing else.
    (Alice, Publish("home/alice/kitchen"), Allowed),
    (Alice, Publish("home/alice"), Allowed),
    (Alice, Publish("home/bob/kitchen"), FORBIDDEN),
    (Alice, Publish("cmd/x"), FORBIDDEN),
    (Alice, Subscribe("home/+/temp"), Allowed),
    (Alice, Subscribe("home/kitchen/temp"), Allowed),
    (Alice, Subscribe("home/#"), FORBIDDEN),
    (Alice, Subscribe("home/+/+"), FORBIDDEN),
    // Subscribe covers it, but there is no consume right.
    (Alice, Durable("home/+/temp"), FORBIDDEN),
    (Alice, Enqueue("orders"), FORBIDDEN),
    (Alice, Consume("orders"), FORBIDDEN),
    (Alice, Job("email"), FORBIDDEN),
    // svc: enqueue/consume orders, enqueue/work email jobs.
    (Svc, Enqueue("orders"), Allowed),
    (Svc, Enqueue("other"), FORBIDDEN),
    (Svc, Consume("orders"), Allowed),
    (Svc, Consume("other"), FORBIDDEN),
    (Svc, Job("email"), Allowed),
    (Svc, Job("sms"), FORBIDDEN),
    (Svc, Publish("home/svc/x"), FORBIDDEN),
    (Svc, Subscribe("orders"), FORBIDDEN),
    (Svc, Durable("orders"), FORBIDDEN),
    // The JWT: subscribe and consume cmd/#.
    (Jwt, Subscribe("cmd/#"), Allowed),
    (Jwt, Subscribe("cmd/device-7/+"), Allowed),
    (Jwt, Subscribe("#"), FORBIDDEN),
    (Jwt, Durable("cmd/#"), Allowed),
    (Jwt, Durable("cmd/+/status"), Allowed),
    (Jwt, Durable("home/+/temp"), FORBIDDEN),
    (Jwt, Publish("cmd/x"), FORBIDDEN),
    (Jwt, Enqueue("orders"), FORBIDDEN),
    (Jwt, Consume("orders"), FORBIDDEN),
    (Jwt, Job("email"), FORBIDDEN),
    // root: everything.
    (Root, Publish("anything/at/all"), Allowed),
    (Root, Subscribe("#"), Allowed),
    (Root, Durable("audit/#"), Allowed),
    (Root, Enqueue("other"), Allowed),
    (Root, Consume("other"), Allowed),
    (Root, Job("sms"), Allowed),
    // HTTP-only routes.
    (Alice, Http("GET", "/admin/sessions", 200), FORBIDDEN),
    (Jwt, Http("GET", "/admin/sessions", 200), FORBIDDEN),
    (Root, Http("GET", "/admin/sessions", 200), Allowed),
    (Svc, Http("GET", "/admin/jobs", 200), FORBIDDEN),
    (Root, Http("GET", "/admin/jobs", 200), Allowed),
    (Svc, Http("GET", "/queues/orders", 200), Allowed),
    (Alice, Http("GET", "/queues/orders", 200), FORBIDDEN),
    // 403 whether the queue exists or not; root learns it does not.
    (Svc, Http("GET", "/queues/never-made", 200), FORBIDDEN),
    (
        Root,
        Http("GET", "/queues/never-made", 200),
        Denied("unknown_queue"),
    ),
    (Alice, Http("DELETE", "/queues/scratch", 204), FORBIDDEN),
    (Svc, Http("DELETE", "/queues/orders", 204), FORBIDDEN),
    (
        Root,
        Http("DELETE", "/queues/never-made", 204),
        Denied("unknown_queue"),
    ),
    (Root, Http("DELETE", "/queues/scratch", 204), Allowed),
    (
        Svc,
        Http("POST", "/queues/orders.dlq/redrive", 200),
        FORBIDDEN,
    ),
];

/// A row's request id on the native endpoints (its subscription id is
/// `r<rid>`).
fn rid_of(row: usize) -> u64 {
    row as u64 + 1
}

/// The native JSON frame of `op`, or `None` if the native protocol has
/// no such operation.
fn native_frame(op: Op, rid: u64) -> Option<Value> {
    let id = format!("r{rid}");
    Some(match op {
        Publish(t) => json!({"op": "publish", "topic": t, "payload": "x", "rid": rid}),
        Subscribe(f) => json!({"op": "subscribe", "id": id, "filter": f, "rid": rid}),
        Durable(f) => {
            json!({"op": "subscribe", "id": id, "filter": f, "durable": true, "prefetch": 1, "rid": rid})
        }
        Enqueue(q) => json!({"op": "enqueue", "queue": q, "payload": "x", "rid": rid}),
        Consume(q) => json!({"op": "consume", "id": id, "queue": q, "prefetch": 1, "rid": rid}),
        Job(k) => json!({"op": "job_enqueue", "kind": k, "entity_id": ENTITY, "rid": rid}),
        Http(..) => return None,
    })
}

/// Runs the rows over raw native connections in `format`, one per
/// principal: alice authenticates with Basic on the upgrade, the others
/// with `hello.token`. Returns how many rows ran.
async fn native_raw_pass(
    b: &TestBroker,
    creds: &Credentials,
    format: Format,
    who: &[Who],
) -> usize {
    let mut ran = 0;
    for &w in who {
        let auth = (w == Alice).then(|| creds.authorization(Alice));
        let mut n = Native::open(b, format, "", auth.as_deref()).await;
        n.hello(&format!("{format:?}-{w:?}"), creds.token(w).as_deref())
            .await;
        for (i, &(_, op, expect)) in ROWS.iter().enumerate().filter(|(_, r)| r.0 == w) {
            let rid = rid_of(i);
            let Some(frame) = native_frame(op, rid) else {
                continue;
            };
            n.send(&frame).await;
            let reply = n.reply(WAIT).await;
            let what = format!("{format:?} {w:?} {op:?}: {frame} -> {reply}");
            assert_eq!(reply["rid"], rid, "{what}");
            match expect {
                Allowed => {
                    let op = reply["op"].as_str().unwrap_or_default();
                    assert!(
                        matches!(op, "receipt" | "enqueued" | "job_reply"),
                        "expected success: {what}"
                    );
                }
                Denied(code) => {
                    assert_eq!(reply["op"], "error", "{what}");
                    assert_eq!(reply["code"], code, "{what}");
                    // The connection stays open and usable.
                    n.still_works(10_000 + rid).await;
                }
            }
            ran += 1;
        }
        n.still_works(1).await;
    }
    ran
}

/// The row's operation through the Rust client; `None` if the native
/// protocol has no such operation.
async fn client_op(c: &Client, op: Op, rid: u64) -> Option<Result<(), ErrorCode>> {
    let result = match op {
        Publish(t) => c.publish_confirmed(t, b"x".to_vec()).await,
        Subscribe(f) => c.subscribe(f).await.map(drop),
        Durable(f) => c
            .subscribe_durable(&format!("r{rid}"), f, 1)
            .await
            .map(drop),
        Enqueue(q) => c.enqueue(q, b"x".to_vec()).await.map(drop),
        Consume(q) => c.consume(q, 1).await.map(drop),
        Job(k) => {
            let job = NewJob {
                kind: k.into(),
                entity_id: ENTITY.parse().unwrap(),
                data: Value::Null,
                priority: 0,
                timeout_ms: None,
            };
            c.jobs().enqueue_job(job).await.map(drop)
        }
        Http(..) => return None,
    };
    Some(match result {
        Ok(()) => Ok(()),
        Err(ClientError::Server { code, .. }) => Err(code),
        Err(e) => panic!("{op:?}: not an answer from the server: {e}"),
    })
}

/// Runs the rows of the token principals through the Rust client with
/// bincode (the error comes back as `ClientError::Server` for the
/// request's rid). Returns how many rows ran.
async fn bincode_client_pass(b: &TestBroker, creds: &Credentials) -> usize {
    let mut ran = 0;
    for w in [Svc, Root, Jwt] {
        let options = ClientOptions {
            format: Format::Bincode,
            client_id: Some(format!("client-{w:?}")),
            token: creds.token(w),
            timeout: WAIT,
            ..ClientOptions::default()
        };
        let c = Client::connect(&b.ws_url(), options).await.unwrap();
        for (i, &(_, op, expect)) in ROWS.iter().enumerate().filter(|(_, r)| r.0 == w) {
            let Some(got) = client_op(&c, op, rid_of(i)).await else {
                continue;
            };
            let got = got.map_err(|code| code.as_str());
            let want = match expect {
                Allowed => Ok(()),
                Denied(code) => Err(code),
            };
            assert_eq!(got, want, "bincode client {w:?} {op:?}");
            c.ping().await.unwrap();
            ran += 1;
        }
        c.close(false).await.unwrap();
    }
    ran
}

/// Runs the rows over MQTT: subscriptions get their SUBACK code (granted
/// QoS 1, or 0x80); publishes are acknowledged either way, and a root
/// watcher subscribed to `#` sees an allowed one before a marker it
/// publishes itself right after, a forbidden one never (the marker comes
/// first). Returns how many rows ran.
async fn mqtt_pass(b: &TestBroker, creds: &Credentials) -> usize {
    let url = mqtt_url(b);
    let mut watcher = MqttClient::connect(&url, mqtt_opts("watcher", Some(creds.mqtt(Root))))
        .await
        .unwrap();
    assert_eq!(watcher.subscribe("#", 1).await.unwrap(), 1);
    let mut ran = 0;
    for w in EVERYONE {
        let mut c =
            MqttClient::connect(&url, mqtt_opts(&format!("mqtt-{w:?}"), Some(creds.mqtt(w))))
                .await
                .unwrap_or_else(|e| panic!("{w:?} connects over MQTT: {e}"));
        for (i, &(_, op, expect)) in ROWS.iter().enumerate().filter(|(_, r)| r.0 == w) {
            let what = format!("MQTT {w:?} {op:?}");
            match op {
                Subscribe(f) => {
                    let code = c.subscribe(f, 1).await.unwrap();
                    let want = if expect == Allowed { 1 } else { 0x80 };
                    assert_eq!(code, want, "{what}");
                }
                Publish(t) => {
                    let payload = format!("row {i}");
                    // Acknowledged whether allowed or not (3.1.1 has no
                    // refusal).
                    c.publish(t, payload.clone().into_bytes(), 1, false)
                        .await
                        .unwrap_or_else(|e| panic!("{what}: no PUBACK: {e}"));
                    // Then an allowed publish: from the same connection
                    // when the principal may publish somewhere, else from
                    // the watcher (after the PUBACK above, by which time
                    // a forwarded publish is already queued for it).
                    let marker = format!("after row {i}");
                    let (from, marker_topic) = match w {
                        Alice => (&mut c, "home/alice/marker"),
                        Root => (&mut c, "marker"),
                        Svc | Jwt => (&mut watcher, "marker"),
                    };
                    from.publish(marker_topic, marker.clone().into_bytes(), 1, false)
                        .await
                        .unwrap();
                    let first = watcher.recv().await.unwrap();
                    let got = (first.topic.as_str(), &first.payload[..]);
                    if expect == Allowed {
                        assert_eq!(got, (t, payload.as_bytes()), "{what}: delivered");
                        let next = watcher.recv().await.unwrap();
                        let got = (next.topic.as_str(), &next.payload[..]);
                        assert_eq!(got, (marker_topic, marker.as_bytes()), "{what}");
                    } else {
                        assert_eq!(
                            got,
                            (marker_topic, marker.as_bytes()),
                            "{what}: the forbidden publish was delivered"
                        );
                    }
                }
                _ => continue,
            }
            c.ping().await.unwrap();
            ran += 1;
        }
        c.disconnect().await.unwrap();
    }
    watcher.disconnect().await.unwrap();
    ran
}

/// Runs the rows over HTTP with each principal's `Authorization`.
/// Returns how many rows ran.
fn http_pass(b: &TestBroker, creds: &Credentials) -> usize {
    let mut ran = 0;
    for &(w, op, expect) in ROWS {
        let job;
        let (method, path, body, ok) = match op {
            Publish(t) => ("POST", format!("/topics/{t}"), "x", 202),
            Enqueue(q) => ("POST", format!("/queues/{q}/messages"), "x", 201),
            Job(k) => {
                job = json!({"kind": k, "entity_id": ENTITY}).to_string();
                ("POST", "/jobs".to_owned(), job.as_str(), 201)
            }
            Http(method, path, ok) => (method, path.to_owned(), "", ok),
            Subscribe(_) | Durable(_) | Consume(_) => continue,
        };
        let r = call(b.addr, method, &path, Some(&creds.authorization(w)), body);
        let what = format!("HTTP {w:?} {method} {path}: {} {}", r.status, r.body);
        match expect {
            Allowed => assert_eq!(r.status, ok, "{what}"),
            Denied(code) => {
                let status = match code {
                    "forbidden" => 403,
                    "unknown_queue" => 404,
                    other => unreachable!("no status listed for {other}"),
                };
                assert_eq!(r.status, status, "{what}");
                assert_eq!(r.code(), code, "{what}");
            }
        }
        ran += 1;
    }
    ran
}

#[test]
fn each_principal_gets_exactly_its_rights_on_every_endpoint() {
    let creds = Credentials::new();
    let b = TestBroker::start(configure);
    for q in ["orders", "scratch"] {
        let path = format!("/queues/{q}/messages");
        let r = call(
            b.addr,
            "POST",
            &path,
            Some(&creds.authorization(Root)),
            "seed",
        );
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let count = |f: fn(&Op) -> bool| ROWS.iter().filter(|r| f(&r.1)).count();
    let native = count(|op| !matches!(op, Http(..)));
    let native_alice = ROWS
        .iter()
        .filter(|r| r.0 == Alice && !matches!(r.1, Http(..)))
        .count();
    let mqtt = count(|op| matches!(op, Publish(_) | Subscribe(_)));
    let http = count(|op| !matches!(op, Subscribe(_) | Durable(_) | Consume(_)));
    block_on(async {
        let ran = native_raw_pass(&b, &creds, Format::Json, &EVERYONE).await;
        assert_eq!(ran, native, "native JSON rows");
        // alice has no token for the Rust client: her bincode rows go
        // over a raw connection with Basic on the upgrade.
        let ran = native_raw_pass(&b, &creds, Format::Bincode, &[Alice]).await;
        assert_eq!(ran, native_alice, "native bincode rows (raw)");
        let ran = bincode_client_pass(&b, &creds).await;
        assert_eq!(ran, native - native_alice, "native bincode rows (client)");
        let ran = mqtt_pass(&b, &creds).await;
        assert_eq!(ran, mqtt, "MQTT rows");
    });
    assert_eq!(http_pass(&b, &creds), http, "HTTP rows");
}

// ---------------------------------------------------------------------
// 2. Authentication failures
// ---------------------------------------------------------------------

/// A broker with the principals that does not block the test's own
/// failures.
fn auth_broker() -> TestBroker {
    TestBroker::start(|c| {
        configure(c);
        c.auth.max_failures = 100;
    })
}

#[test]
fn native_bad_or_missing_credentials_get_unauthorized_then_4401() {
    let b = auth_broker();
    block_on(async {
        // A bad token in hello.
        let mut n = Native::open(&b, Format::Json, "", None).await;
        let hello = json!({"op": "hello", "token": "not-a-token"});
        n.refused(&hello, "unauthorized", 4401).await;
        // A frame before any hello, with nothing on the upgrade.
        let mut n = Native::open(&b, Format::Json, "", None).await;
        let ping = json!({"op": "ping", "rid": 7});
        n.refused(&ping, "unauthorized", 4401).await;
        // A hello without a token, with nothing on the upgrade.
        let mut n = Native::open(&b, Format::Json, "", None).await;
        n.refused(&json!({"op": "hello"}), "unauthorized", 4401)
            .await;
        // The Rust client sees the refusal of its hello.
        let options = ClientOptions {
            token: Some("wrong".into()),
            timeout: WAIT,
            ..ClientOptions::default()
        };
        match Client::connect(&b.ws_url(), options).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Unauthorized),
            Err(e) => panic!("not the server's refusal: {e}"),
            Ok(_) => panic!("a bad token was accepted"),
        }
    });
}

#[test]
fn upgrade_credentials_query_token_bearer_and_basic() {
    let b = auth_broker();
    block_on(async {
        // ?token= on the upgrade: no hello needed, and it is svc.
        let mut n = Native::open(&b, Format::Json, &format!("?token={SVC_TOKEN}"), None).await;
        n.still_works(1).await;
        n.send(&json!({"op": "enqueue", "queue": "orders", "payload": "x", "rid": 2}))
            .await;
        assert_eq!(n.reply(WAIT).await["op"], "enqueued");
        n.send(&json!({"op": "enqueue", "queue": "other", "payload": "x", "rid": 3}))
            .await;
        assert_eq!(n.reply(WAIT).await["code"], "forbidden");
        // Authorization: Bearer on the upgrade.
        let mut n = Native::open(&b, Format::Json, "", Some(&bearer(ROOT_TOKEN))).await;
        n.still_works(4).await;
        n.send(&json!({"op": "enqueue", "queue": "other", "payload": "x", "rid": 5}))
            .await;
        assert_eq!(n.reply(WAIT).await["op"], "enqueued");
        // Basic on the upgrade.
        let alice = basic("alice", ALICE_PASSWORD);
        let mut n = Native::open(&b, Format::Json, "", Some(&alice)).await;
        n.send(&json!({"op": "publish", "topic": "home/alice/x", "payload": "x", "rid": 6}))
            .await;
        assert_eq!(n.reply(WAIT).await, json!({"op": "receipt", "rid": 6}));
    });
    // A bad ?token= (or header) refuses the upgrade itself.
    for (path, extra) in [
        ("/ws?token=wrong", String::new()),
        ("/ws", format!("Authorization: {}\r\n", bearer("wrong"))),
        (
            "/mqtt?token=wrong",
            "Sec-WebSocket-Protocol: mqtt\r\n".to_owned(),
        ),
    ] {
        let head = upgrade_head(b.addr, path, &extra);
        assert_eq!(status_of(&head), 401, "{path}: {head}");
        assert!(
            head.to_ascii_lowercase().contains("www-authenticate:"),
            "{head}"
        );
    }
    // A good one upgrades.
    let head = upgrade_head(b.addr, &format!("/ws?token={SVC_TOKEN}"), "");
    assert_eq!(status_of(&head), 101, "{head}");
}

#[test]
fn mqtt_bad_credentials_get_connack_4_missing_5_and_a_jwt_password_works() {
    let b = auth_broker();
    let creds = Credentials::new();
    block_on(async {
        let wrong = Some(("alice".to_owned(), "wrong".to_owned()));
        let e = connack_refusal(&b, wrong).await;
        assert!(e.ends_with("code 4"), "{e}");
        let unknown = Some(("svc".to_owned(), "not-a-token".to_owned()));
        let e = connack_refusal(&b, unknown).await;
        assert!(e.ends_with("code 4"), "{e}");
        let e = connack_refusal(&b, None).await;
        assert!(e.ends_with("code 5"), "{e}");
        // A JWT as the password (the user name is ignored).
        let opts = mqtt_opts("jwt-client", Some(creds.mqtt(Jwt)));
        let mut c = MqttClient::connect(&mqtt_url(&b), opts).await.unwrap();
        assert_eq!(c.subscribe("cmd/#", 1).await.unwrap(), 1);
        assert_eq!(c.subscribe("home/#", 1).await.unwrap(), 0x80);
        c.ping().await.unwrap();
        // alice's password.
        let opts = mqtt_opts("alice-client", Some(creds.mqtt(Alice)));
        let mut c = MqttClient::connect(&mqtt_url(&b), opts).await.unwrap();
        assert_eq!(c.subscribe("home/+/temp", 0).await.unwrap(), 0);
    });
}

#[test]
fn http_missing_or_bad_credentials_get_401_with_www_authenticate() {
    let b = auth_broker();
    let r = call(b.addr, "POST", "/topics/home/alice/x", None, "x");
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.code(), "unauthorized", "{}", r.body);
    let challenge = r
        .header("www-authenticate")
        .expect("a WWW-Authenticate header");
    assert!(
        challenge.contains("Bearer") && challenge.contains("Basic"),
        "{challenge}"
    );
    for bad in [
        basic("alice", "wrong"),
        basic("nobody", "wrong"),
        bearer("wrong"),
        "Digest abc".to_owned(),
    ] {
        let r = call(b.addr, "POST", "/topics/home/alice/x", Some(&bad), "x");
        assert_eq!(r.status, 401, "{bad}: {}", r.body);
        assert_eq!(r.code(), "unauthorized", "{bad}: {}", r.body);
        assert!(r.header("www-authenticate").is_some(), "{bad}");
    }
    let alice = basic("alice", ALICE_PASSWORD);
    let r = call(b.addr, "POST", "/topics/home/alice/x", Some(&alice), "x");
    assert_eq!(r.status, 202, "{}", r.body);
    // A token as a Basic password (the user name is not a user's).
    let svc = basic("anyone", SVC_TOKEN);
    let r = call(b.addr, "POST", "/queues/orders/messages", Some(&svc), "x");
    assert_eq!(r.status, 201, "{}", r.body);
    // /health needs nothing.
    assert_eq!(call(b.addr, "GET", "/health", None, "").status, 200);
}

// ---------------------------------------------------------------------
// 3. Failed authentications per address
// ---------------------------------------------------------------------

#[test]
fn after_max_failures_even_good_credentials_are_refused() {
    let b = TestBroker::start(|c| {
        configure(c);
        c.auth.max_failures = 3;
    });
    block_on(async {
        // Three failures from 127.0.0.1, one per endpoint.
        let mut n = Native::open(&b, Format::Json, "", None).await;
        n.refused(
            &json!({"op": "hello", "token": "wrong"}),
            "unauthorized",
            4401,
        )
        .await;
        let r = call(b.addr, "GET", "/queues", Some(&bearer("wrong")), "");
        assert_eq!(r.status, 401, "{}", r.body);
        let e = connack_refusal(&b, Some(("svc".into(), "wrong".into()))).await;
        assert!(e.ends_with("code 4"), "{e}");
        // The fourth attempt, with a good token, is refused everywhere.
        let mut n = Native::open(&b, Format::Json, "", None).await;
        let hello = json!({"op": "hello", "token": SVC_TOKEN});
        n.refused(&hello, "too_many_failures", 4401).await;
        let options = ClientOptions {
            token: Some(ROOT_TOKEN.into()),
            timeout: WAIT,
            ..ClientOptions::default()
        };
        match Client::connect(&b.ws_url(), options).await {
            Err(ClientError::Server { code, .. }) => {
                assert_eq!(code, ErrorCode::TooManyFailures);
            }
            Err(e) => panic!("not the server's refusal: {e}"),
            Ok(_) => panic!("a blocked address was let in"),
        }
        let e = connack_refusal(&b, Some(("svc".into(), SVC_TOKEN.into()))).await;
        assert!(e.ends_with("code 5"), "{e}");
    });
    let r = call(b.addr, "GET", "/queues", Some(&bearer(ROOT_TOKEN)), "");
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(r.code(), "too_many_failures", "{}", r.body);
    let alice = basic("alice", ALICE_PASSWORD);
    let r = call(b.addr, "POST", "/topics/home/alice/x", Some(&alice), "x");
    assert_eq!(r.status, 429, "{}", r.body);
    let head = upgrade_head(b.addr, &format!("/ws?token={SVC_TOKEN}"), "");
    assert_eq!(status_of(&head), 429, "{head}");
    // Unauthenticated routes are unaffected.
    assert_eq!(call(b.addr, "GET", "/health", None, "").status, 200);
}

/// Guesses sent all at once are counted before they are checked: of 60
/// simultaneous wrong passwords from one address (limit 10), at most 10
/// are checked (401); the rest are refused unchecked (429 for the limit,
/// 503 past the address's share of concurrent checks). Guesses that
/// follow one by one are checked only until the window's 10 are used up,
/// and then the right password is refused too.
#[test]
fn simultaneous_guesses_are_counted_before_they_are_checked() {
    for at_once in [60, 300] {
        guesses_at_once(at_once);
    }
}

/// `at_once` simultaneous wrong passwords from one address, then more
/// one by one, on a fresh broker (limit 10).
fn guesses_at_once(at_once: usize) {
    let b = TestBroker::start(|c| {
        configure(c);
        c.auth.max_failures = 10;
    });
    let addr = b.addr;
    let guess = move |i: usize| {
        let wrong = basic("alice", &format!("guess-{i}"));
        call(addr, "POST", "/topics/home/alice/x", Some(&wrong), "x").status
    };
    let guesses: Vec<_> = (0..at_once)
        .map(|i| std::thread::spawn(move || guess(i)))
        .collect();
    let statuses: Vec<u16> = guesses.into_iter().map(|g| g.join().unwrap()).collect();
    let mut checked = statuses.iter().filter(|&&s| s == 401).count();
    assert!(
        checked <= 10,
        "{checked} of {at_once} guesses were checked: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|s| [401, 429, 503].contains(s)),
        "{statuses:?}"
    );
    // One by one: checked until the window's attempts are used up.
    for i in at_once..at_once + 20 {
        match guess(i) {
            401 => checked += 1,
            429 => break,
            other => panic!("guess {i}: {other}"),
        }
    }
    assert_eq!(checked, 10, "wrong passwords checked in the window");
    let alice = basic("alice", ALICE_PASSWORD);
    let r = call(addr, "POST", "/topics/home/alice/x", Some(&alice), "x");
    assert_eq!(
        r.status, 429,
        "the right password after the guesses: {}",
        r.body
    );
}

/// The status of an HTTP request sent from the loopback address `from`
/// (any of 127.0.0.0/8), so that a test can be several clients.
fn status_from(from: std::net::Ipv4Addr, to: SocketAddr, path: &str, authorization: &str) -> u16 {
    use std::io::{Read, Write};
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((from, 0)).into()).unwrap();
    socket.connect_timeout(&to.into(), WAIT).unwrap();
    let mut t: std::net::TcpStream = socket.into();
    t.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        t,
        "POST {path} HTTP/1.1\r\nHost: {to}\r\nAuthorization: {authorization}\r\n\
         Content-Length: 1\r\nConnection: close\r\n\r\nx"
    )
    .unwrap();
    let mut head = [0u8; 12];
    match t.read_exact(&mut head) {
        Ok(()) => status_of(&String::from_utf8_lossy(&head)),
        Err(_) => 0,
    }
}

/// A flood of wrong passwords from 24 addresses, each with as many checks
/// in hand as it may have (and no failure limit to stop them): logins
/// from another address, each a first login (no remembered check), are
/// served ahead of the flood's line, not behind it. First come, first
/// served, each would wait behind ~96 argon2 checks run two at a time.
#[test]
fn a_password_flood_from_many_addresses_does_not_hold_up_another_login() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let b = TestBroker::start(|c| {
        configure(c);
        c.auth.max_failures = 0;
        for i in 0..3 {
            c.auth.users.push(wharf::config::auth::UserConfig {
                name: format!("late-{i}"),
                password_hash: alice_hash(),
                allow: Permissions {
                    publish: list(&["home/%u/#"]),
                    ..Permissions::default()
                },
            });
        }
    });
    let addr = b.addr;
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));
    // How long each checked guess took, once the line had formed.
    let waits = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut flood = Vec::new();
    for a in 2..26u8 {
        for t in 0..4 {
            let (stop, checked, waits) = (stop.clone(), checked.clone(), waits.clone());
            flood.push(std::thread::spawn(move || {
                let from = std::net::Ipv4Addr::new(127, 0, 0, a);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let wrong = basic("alice", &format!("guess-{a}-{t}-{i}"));
                    let started = Instant::now();
                    if status_from(from, addr, "/topics/home/alice/x", &wrong) == 401 {
                        if i > 0 {
                            waits.lock().unwrap().push(started.elapsed());
                        }
                        checked.fetch_add(1, Ordering::Relaxed);
                    }
                    i += 1;
                }
            }));
        }
    }
    // Under way: the line has formed and checks are being answered.
    assert!(common::wait_until(Duration::from_secs(30), || {
        checked.load(Ordering::Relaxed) >= 8
    }));
    let mut took = Vec::new();
    for i in 0..3 {
        let started = Instant::now();
        let late = basic(&format!("late-{i}"), ALICE_PASSWORD);
        let path = format!("/topics/home/late-{i}/x");
        let status = status_from(std::net::Ipv4Addr::LOCALHOST, addr, &path, &late);
        took.push(started.elapsed());
        assert_eq!(status, 202, "login {i} during the flood");
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.join().unwrap();
    }
    let mut waits = std::mem::take(&mut *waits.lock().unwrap());
    waits.sort();
    let flood_median = waits[waits.len() / 2];
    eprintln!(
        "logins during the flood took {took:?}; the flood's guesses {flood_median:?} (median)"
    );
    // Relative to the flood's own wait, so that a slow machine slows
    // both: first come, first served, a login waits as long as a guess.
    assert!(
        took.iter().all(|t| *t < flood_median / 3),
        "logins during the flood took {took:?}, the flood's guesses {flood_median:?} \
         (median of {})",
        waits.len()
    );
}

/// A connection that brings no credentials is not kept waiting for
/// them: a native session without a hello is told `unauthorized` and
/// closed with 4401 at `hello_timeout_s`, and an MQTT connection without
/// a CONNECT is closed then, long before the idle timeout.
#[test]
fn connections_without_credentials_are_closed_at_the_hello_timeout() {
    let b = TestBroker::start_tcp(|c| {
        configure(c);
        c.session.hello_timeout_s = 1;
        c.session.idle_timeout_s = 60;
    });
    block_on(async {
        let started = std::time::Instant::now();
        let mut n = Native::open(&b, Format::Json, "", None).await;
        let e = n.reply(WAIT).await;
        assert_eq!(e["op"], "error", "{e}");
        assert_eq!(e["code"], "unauthorized", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap_or("")
                .contains("hello_timeout_s"),
            "{e}"
        );
        assert_eq!(n.close_code(WAIT).await, Some(4401));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        // A session that says hello in time stays.
        let mut n = Native::open(&b, Format::Json, "", None).await;
        n.hello("in-time", Some(SVC_TOKEN)).await;
        // Past the hello timeout nothing comes (no error, no close).
        assert!(matches!(
            n.recv(Duration::from_millis(1500)).await,
            Incoming::Nothing
        ));
        n.still_works(7).await;
    });
    // The operator sees it: the denial by why and way in on /metrics, and
    // on the dashboard's overview, beside a wrong token over HTTP.
    let r = call(b.addr, "GET", "/queues", Some(&bearer("wrong")), "");
    assert_eq!(r.status, 401, "{}", r.body);
    let auth = format!("Authorization: Bearer {ROOT_TOKEN}\r\n");
    let (status, _, metrics) = common::http_request(b.addr, "GET", "/metrics", &auth, "");
    assert_eq!(status, 200, "{metrics}");
    for line in [
        r#"wharf_auth_denials_total{reason="no_credentials_in_time",way="native"} 1"#,
        r#"wharf_auth_denials_total{reason="bad_credentials",way="http"} 1"#,
        r#"wharf_auth_denials_total{reason="blocked",way="mqtt"} 0"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "no {line:?} in:\n{metrics}"
        );
    }
    let o = call(
        b.addr,
        "GET",
        "/admin/overview",
        Some(&bearer(ROOT_TOKEN)),
        "",
    );
    assert_eq!(o.body["denials"]["no_credentials_in_time"], 1, "{}", o.body);
    assert_eq!(o.body["denials"]["bad_credentials"], 1, "{}", o.body);
    // MQTT over TCP: a connection that sends nothing is closed.
    let mut t = std::net::TcpStream::connect(b.mqtt_addr.unwrap()).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let n = std::io::Read::read(&mut t, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the connection was not closed");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // And counted as such.
    let (_, _, metrics) = common::http_request(b.addr, "GET", "/metrics", &auth, "");
    let line = r#"wharf_auth_denials_total{reason="no_credentials_in_time",way="mqtt"} 1"#;
    assert!(
        metrics.lines().any(|l| l == line),
        "no {line:?} in:\n{metrics}"
    );
}

/// One address may hold at most `max_unauthenticated_per_address`
/// connections that have not authenticated: past it a native or MQTT
/// WebSocket upgrade gets 429 `rate_limited` and an MQTT/TCP connection is
/// closed at once; one that authenticates frees its place, another
/// address is unaffected, and upgrades that bring credentials are never
/// counted.
#[test]
fn an_address_may_hold_only_so_many_unauthenticated_connections() {
    let b = TestBroker::start_tcp(|c| {
        configure(c);
        c.auth.max_unauthenticated_per_address = 3;
    });
    block_on(async {
        let mut waiting = Vec::new();
        for _ in 0..3 {
            waiting.push(Native::open(&b, Format::Json, "", None).await);
        }
        // The fourth, native and MQTT over WebSocket: refused before the
        // upgrade.
        let (mut t, head) = common::ws_upgrade(b.addr, "/ws", "");
        assert_eq!(status_of(&head), 429, "{head}");
        let mut body = String::new();
        let _ = std::io::Read::read_to_string(&mut t, &mut body);
        assert!(body.contains("rate_limited"), "{body}");
        let head = upgrade_head(b.addr, "/mqtt", "Sec-WebSocket-Protocol: mqtt\r\n");
        assert_eq!(status_of(&head), 429, "{head}");
        // MQTT over TCP: closed at once, before any CONNECT.
        let mut t = std::net::TcpStream::connect(b.mqtt_addr.unwrap()).unwrap();
        t.set_read_timeout(Some(WAIT)).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(std::io::Read::read(&mut t, &mut buf).unwrap_or(99), 0);
        // Credentials on the upgrade are not counted.
        let head = upgrade_head(b.addr, &format!("/ws?token={SVC_TOKEN}"), "");
        assert_eq!(status_of(&head), 101, "{head}");
        // Another address (127.0.0.2, on loopback) has its own share.
        let other = tokio::net::TcpSocket::new_v4().unwrap();
        other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut s = other.connect(b.addr).await.unwrap();
        let req = format!(
            "GET /ws HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
            b.addr
        );
        tokio::io::AsyncWriteExt::write_all(&mut s, req.as_bytes())
            .await
            .unwrap();
        let mut head = vec![0u8; 256];
        let n = actix_rt::time::timeout(WAIT, tokio::io::AsyncReadExt::read(&mut s, &mut head))
            .await
            .unwrap()
            .unwrap();
        let head = String::from_utf8_lossy(&head[..n]).into_owned();
        assert_eq!(status_of(&head), 101, "{head}");
        // One of the three authenticates: its place is free again.
        waiting[0].hello("now-proven", Some(SVC_TOKEN)).await;
        let head = upgrade_head(b.addr, "/ws", "");
        assert_eq!(status_of(&head), 101, "{head}");
        // Closing the others frees theirs too.
        waiting.truncate(1);
        let freed = common::eventually_every(Duration::from_millis(20), WAIT, || {
            status_of(&upgrade_head(b.addr, "/ws", "")) == 101
        })
        .await;
        assert!(freed, "closed connections kept their places");
        waiting[0].still_works(1).await;
    });
}

// ---------------------------------------------------------------------
// 4. JWT expiry and refresh
// ---------------------------------------------------------------------

fn jwt_broker() -> TestBroker {
    TestBroker::start(|c| {
        configure(c);
        c.auth.jwt.leeway_s = 0;
        c.auth.max_failures = 100;
    })
}

/// The monotonic instant `exp` (Unix seconds) falls at.
fn instant_of(exp: u64) -> Instant {
    let at = UNIX_EPOCH + Duration::from_secs(exp);
    let left = at.duration_since(SystemTime::now()).unwrap_or_default();
    Instant::now() + left
}

#[test]
fn a_session_whose_jwt_expires_gets_unauthorized_then_4403() {
    let b = jwt_broker();
    let exp = unix_now() + 3;
    let token = jwt(JWT_SUB, exp, jwt_rights());
    block_on(async {
        // An MQTT connection with the same JWT (as the password).
        let mqtt = mqtt_opts("expiring", Some(("ignored".into(), token.clone())));
        let mut m = MqttClient::connect(&mqtt_url(&b), mqtt).await.unwrap();
        let mut n = Native::open(&b, Format::Json, "", None).await;
        n.hello("expiring", Some(&token)).await;
        n.send(&json!({"op": "subscribe", "id": "s", "filter": "cmd/#", "rid": 1}))
            .await;
        assert_eq!(n.reply(WAIT).await, json!({"op": "receipt", "rid": 1}));
        // Nothing more is sent: the broker speaks up at the expiry.
        let notice = n.reply(Duration::from_secs(10)).await;
        assert_eq!(notice["op"], "error", "{notice}");
        assert_eq!(notice["code"], "unauthorized", "{notice}");
        assert!(notice["rid"].is_null(), "{notice}");
        assert_eq!(n.close_code(WAIT).await, Some(4403));
        // Not before the expiry (allowing for the clocks' rounding).
        let early = instant_of(exp).saturating_duration_since(Instant::now());
        assert!(early < Duration::from_millis(100), "closed {early:?} early");
        // MQTT has no error packet: the connection is closed with 4403.
        assert_eq!(m.closed().await, Some(4403));
    });
}

#[test]
fn refresh_moves_the_expiry_and_refuses_other_principals_and_bad_tokens() {
    let b = jwt_broker();
    let first = unix_now() + 3;
    let short = jwt(JWT_SUB, first, jwt_rights());
    let long = jwt(JWT_SUB, unix_now() + 120, jwt_rights());
    let someone_else = jwt("device-8", unix_now() + 120, jwt_rights());
    block_on(async {
        let options = ClientOptions {
            token: Some(short),
            timeout: WAIT,
            ..ClientOptions::default()
        };
        let mut c = Client::connect(&b.ws_url(), options).await.unwrap();
        c.refresh(&long).await.unwrap();
        match c.refresh(&someone_else).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            other => panic!("another principal's token: {other:?}"),
        }
        match c.refresh("not.a.jwt").await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Unauthorized),
            other => panic!("a bad token: {other:?}"),
        }
        match c.refresh(ROOT_TOKEN).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            other => panic!("root's token: {other:?}"),
        }
        // Time itself is under test: wait until the first token has
        // expired; the session, refreshed, is still open.
        actix_rt::time::sleep_until((instant_of(first) + Duration::from_millis(700)).into()).await;
        c.ping().await.unwrap();
        assert_eq!(c.next_error(Duration::ZERO).await, None);
        // Still the JWT's rights, not root's.
        let sub = c.subscribe("cmd/#").await;
        assert!(sub.is_ok(), "{:?}", sub.err());
        match c.subscribe("#").await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            other => panic!("subscribe #: {:?}", other.err()),
        }
    });
}

// ---------------------------------------------------------------------
// 5. Anonymous access
// ---------------------------------------------------------------------

#[test]
fn anonymous_off_refuses_clients_without_credentials() {
    let b = TestBroker::start(|c| c.auth.anonymous = Some(false));
    block_on(async {
        let mut n = Native::open(&b, Format::Json, "", None).await;
        n.refused(&json!({"op": "hello"}), "unauthorized", 4401)
            .await;
        let mut n = Native::open(&b, Format::Json, "", None).await;
        let publish = json!({"op": "publish", "topic": "t", "payload": "x", "rid": 3});
        n.refused(&publish, "unauthorized", 4401).await;
        let e = connack_refusal(&b, None).await;
        assert!(e.ends_with("code 5"), "{e}");
    });
    let r = call(b.addr, "POST", "/topics/t", None, "x");
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(r.code(), "unauthorized", "{}", r.body);
    assert!(r.header("www-authenticate").is_some());
    assert_eq!(call(b.addr, "GET", "/health", None, "").status, 200);
}

#[test]
fn without_auth_config_anonymous_clients_may_do_everything() {
    let b = TestBroker::start(|_| {});
    assert_eq!(call(b.addr, "GET", "/admin/sessions", None, "").status, 200);
    assert_eq!(call(b.addr, "POST", "/topics/a/b", None, "x").status, 202);
}

// ---------------------------------------------------------------------
// 6. MQTT client ids are per principal
// ---------------------------------------------------------------------

#[test]
fn an_mqtt_client_id_is_taken_over_only_by_the_same_principal() {
    let b = auth_broker();
    let creds = Credentials::new();
    let url = mqtt_url(&b);
    let url = url.as_str();
    let creds = &creds;
    block_on(async {
        let connect =
            move |who: Who| MqttClient::connect(url, mqtt_opts("shared-id", Some(creds.mqtt(who))));
        let mut alice = connect(Alice).await.unwrap();
        let mut svc = connect(Svc).await.unwrap();
        let mut jwt = connect(Jwt).await.unwrap();
        // Three principals, one client id: nobody was taken over.
        alice.ping().await.unwrap();
        svc.ping().await.unwrap();
        jwt.ping().await.unwrap();
        // alice again: her old connection goes, the others stay.
        let mut alice2 = connect(Alice).await.unwrap();
        assert_eq!(alice.closed().await, Some(1000));
        alice2.ping().await.unwrap();
        svc.ping().await.unwrap();
        jwt.ping().await.unwrap();
        // The same for a token principal.
        let mut svc2 = connect(Svc).await.unwrap();
        assert_eq!(svc.closed().await, Some(1000));
        svc2.ping().await.unwrap();
        alice2.ping().await.unwrap();
        jwt.ping().await.unwrap();
    });
}

// ---------------------------------------------------------------------
// Bugs found while writing these tests: each asserts the behaviour the
// permission model calls for and fails today. Run them with
// `cargo nextest run --test auth --run-ignored only`.
// ---------------------------------------------------------------------

/// `exp` as a JSON number with a fraction is accepted by `jsonwebtoken`
/// (it rounds it), but src/auth/jwt.rs reads it with `as_u64`, gets
/// `None`, and the session never expires.
#[test]
fn a_jwt_with_a_fractional_exp_still_expires_the_session() {
    let b = jwt_broker();
    let exp = unix_now() + 2;
    let claims = json!({"sub": JWT_SUB, "exp": exp as f64 + 0.25, "wharf": jwt_rights()});
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()),
    )
    .unwrap();
    block_on(async {
        let mut n = Native::open(&b, Format::Json, "", None).await;
        n.hello("fractional", Some(&token)).await;
        match n.recv(Duration::from_secs(10)).await {
            Incoming::Frame(notice) => assert_eq!(notice["code"], "unauthorized", "{notice}"),
            Incoming::Closed(code) => panic!("closed with {code:?} and no notice"),
            Incoming::Nothing => panic!("still open 10 s after the token's exp"),
        }
        assert_eq!(n.close_code(WAIT).await, Some(4403));
    });
}

/// `worker_register` with no kinds means "every kind", and the check in
/// src/session/ops/permit.rs (and src/transport/jobs.rs) only looks at
/// the kinds listed: svc, whose work_jobs is `["email"]`, registers for
/// every kind and is handed an `sms` job.
#[test]
fn a_worker_for_every_kind_needs_every_kind() {
    let b = auth_broker();
    let url = b.ws_url();
    let url = url.as_str();
    block_on(async {
        let connect = move |token: &str| {
            let options = ClientOptions {
                token: Some(token.to_owned()),
                timeout: WAIT,
                ..ClientOptions::default()
            };
            Client::connect(url, options)
        };
        let root = connect(ROOT_TOKEN).await.unwrap();
        let svc = connect(SVC_TOKEN).await.unwrap();
        let job = NewJob {
            kind: "sms".into(),
            entity_id: ENTITY.parse().unwrap(),
            data: json!({"to": "+100"}),
            priority: 0,
            timeout_ms: None,
        };
        root.jobs().enqueue_job(job).await.unwrap();
        match svc.jobs().register_worker(&[]).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            Err(e) => panic!("not the server's refusal: {e}"),
            Ok((worker, _)) => {
                let got = svc.jobs().dequeue_job(worker, Duration::ZERO).await;
                panic!("svc (work_jobs = [email]) registered for every kind and dequeued {got:?}");
            }
        }
    });
    // The same over HTTP: an empty body registers for every kind.
    let r = call(b.addr, "POST", "/workers", Some(&bearer(SVC_TOKEN)), "");
    assert_eq!(r.status, 403, "{}", r.body);
}

/// A persistent MQTT session's subscriptions are durable subscriptions
/// (queues), which need the consume right on the native protocol; MQTT
/// only checks subscribe (src/session/mqtt/mod.rs, `subscribe`).
#[test]
fn an_mqtt_persistent_subscription_needs_the_consume_right() {
    let b = auth_broker();
    let creds = Credentials::new();
    block_on(async {
        // Native: alice may subscribe to home/+/temp, not durably.
        let alice = creds.authorization(Alice);
        let mut n = Native::open(&b, Format::Json, "", Some(&alice)).await;
        n.hello("alice-native", None).await;
        let durable = json!({"op": "subscribe", "id": "d", "filter": "home/+/temp", "durable": true, "rid": 1});
        n.send(&durable).await;
        assert_eq!(n.reply(WAIT).await["code"], "forbidden");
        // MQTT, persistent session: the same durable subscription.
        let opts = MqttOptions {
            clean: false,
            ..mqtt_opts("alice-persistent", Some(creds.mqtt(Alice)))
        };
        let mut c = MqttClient::connect(&mqtt_url(&b), opts).await.unwrap();
        assert_eq!(c.subscribe("home/+/temp", 1).await.unwrap(), 0x80);
    });
}

/// A persistent MQTT session's durable subscriptions are resumed at
/// CONNECT without asking whether the principal may still make them
/// (src/session/mqtt/mod.rs, `connect`, the `existing` loop): a JWT for
/// the same `sub` whose rights no longer include `cmd/#` still receives
/// what `cmd/#` collected.
#[test]
fn a_resumed_mqtt_session_gets_only_what_its_rights_allow() {
    let b = auth_broker();
    let creds = Credentials::new();
    let exp = unix_now() + 600;
    let broad = jwt(
        "device-9",
        exp,
        json!({"subscribe": ["cmd/#", "other/#"], "consume": ["cmd/#", "other/#"]}),
    );
    let narrow = jwt(
        "device-9",
        exp,
        json!({"subscribe": ["other/#"], "consume": ["other/#"]}),
    );
    let url = mqtt_url(&b);
    let persistent = |token: &str| MqttOptions {
        clean: false,
        ..mqtt_opts("device-9", Some(("ignored".into(), token.to_owned())))
    };
    block_on(async {
        let mut c = MqttClient::connect(&url, persistent(&broad)).await.unwrap();
        assert_eq!(c.subscribe("cmd/#", 1).await.unwrap(), 1);
        c.disconnect().await.unwrap();
        // While it is away, cmd/x is kept for it.
        let root = creds.authorization(Root);
        let r = call(b.addr, "POST", "/topics/cmd/x", Some(&root), "kept");
        assert_eq!(r.status, 202, "{}", r.body);
        // Back with rights that no longer cover cmd/#.
        let mut c = MqttClient::connect(&url, persistent(&narrow))
            .await
            .unwrap();
        assert_eq!(c.subscribe("other/#", 1).await.unwrap(), 1);
        let r = call(b.addr, "POST", "/topics/other/y", Some(&root), "marker");
        assert_eq!(r.status, 202, "{}", r.body);
        let first = c.recv().await.unwrap();
        assert_eq!(
            first.topic, "other/y",
            "received {first:?} with no right to cmd/#"
        );
    });
}

// ---------------------------------------------------------------------
// Rights that change under a live session: workers bound to their
// principal, a refresh that narrows rights, a JWKS key withdrawn
// ---------------------------------------------------------------------

/// A worker id is not a capability: another principal that learns it
/// (even the admin) cannot ping, dequeue with it or report its outcomes,
/// over HTTP or the native protocol; its own principal can.
#[test]
fn a_worker_serves_only_the_principal_that_registered_it() {
    let b = auth_broker();
    let thief = jwt(
        "thief",
        unix_now() + 600,
        json!({"work_jobs": ["email"], "enqueue_jobs": ["email"]}),
    );
    let url = b.ws_url();
    let (worker, job_id, token) = block_on(async {
        let options = |t: &str| ClientOptions {
            token: Some(t.to_owned()),
            timeout: WAIT,
            ..ClientOptions::default()
        };
        let svc = Client::connect(&url, options(SVC_TOKEN)).await.unwrap();
        let (worker, _) = svc.jobs().register_worker(&["email"]).await.unwrap();
        let job = NewJob {
            kind: "email".into(),
            entity_id: ENTITY.parse().unwrap(),
            data: json!({"to": "a@example.com", "secret": "reset-link"}),
            priority: 0,
            timeout_ms: None,
        };
        svc.jobs().enqueue_job(job).await.unwrap();
        // The other principal, with the same rights, over the native
        // protocol: refused with forbidden, and no job leaks.
        let other = Client::connect(&url, options(&thief)).await.unwrap();
        match other.jobs().dequeue_job(worker, Duration::ZERO).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            got => panic!("another principal dequeued with svc's worker: {got:?}"),
        }
        // svc itself still can.
        let job = svc
            .jobs()
            .dequeue_job(worker, Duration::ZERO)
            .await
            .unwrap()
            .expect("svc's worker gets the job");
        (worker, job.id, job.token.unwrap())
    });
    // Over HTTP, for the JWT principal and for root (admin): 403 on
    // every worker route; the job stays svc's, running.
    for auth in [bearer(&thief), bearer(ROOT_TOKEN)] {
        let r = call(
            b.addr,
            "POST",
            &format!("/workers/{worker}/ping"),
            Some(&auth),
            "",
        );
        assert_eq!(
            (r.status, r.code().clone()),
            (403, json!("forbidden")),
            "{}",
            r.body
        );
        let r = call(
            b.addr,
            "POST",
            &format!("/workers/{worker}/dequeue"),
            Some(&auth),
            "",
        );
        assert_eq!(r.status, 403, "{}", r.body);
        let body = json!({"worker_id": worker, "token": token, "outcome": "failed", "error": "x"});
        let path = format!("/jobs/{job_id}/outcome");
        let r = call(b.addr, "POST", &path, Some(&auth), &body.to_string());
        assert_eq!(r.status, 403, "{}", r.body);
    }
    let r = call(
        b.addr,
        "GET",
        &format!("/jobs/{job_id}"),
        Some(&bearer(SVC_TOKEN)),
        "",
    );
    assert_eq!(r.body["status"], "running", "{}", r.body);
    let body = json!({"worker_id": worker, "token": token, "outcome": "succeeded"});
    let path = format!("/jobs/{job_id}/outcome");
    let r = call(
        b.addr,
        "POST",
        &path,
        Some(&bearer(SVC_TOKEN)),
        &body.to_string(),
    );
    assert_eq!(
        (r.status, &r.body["status"]),
        (200, &json!("succeeded")),
        "{}",
        r.body
    );
}

/// A `refresh` whose token grants less ends the subscriptions and
/// consumers the new rights do not cover, each with an `ended` frame,
/// and keeps the others; nothing more arrives for an ended one.
#[test]
fn a_refresh_that_narrows_rights_ends_what_they_no_longer_allow() {
    let b = jwt_broker();
    let exp = unix_now() + 600;
    let broad = jwt(
        "device-3",
        exp,
        json!({"subscribe": ["cmd/#"], "consume": ["cmd/#"]}),
    );
    let narrow = jwt("device-3", exp, json!({"subscribe": ["cmd/a"]}));
    let root = bearer(ROOT_TOKEN);
    block_on(async {
        let mut n = Native::open(&b, Format::Json, "", None).await;
        n.hello("device-3", Some(&broad)).await;
        let subs = [
            json!({"op": "subscribe", "id": "a", "filter": "cmd/a", "rid": 1}),
            json!({"op": "subscribe", "id": "b", "filter": "cmd/b", "rid": 2}),
            json!({"op": "subscribe", "id": "d", "filter": "cmd/#", "durable": true, "rid": 3}),
        ];
        for (rid, s) in subs.iter().enumerate() {
            n.send(s).await;
            assert_eq!(
                n.reply(WAIT).await,
                json!({"op": "receipt", "rid": rid + 1})
            );
        }
        n.send(&json!({"op": "refresh", "token": narrow, "rid": 4}))
            .await;
        assert_eq!(n.reply(WAIT).await, json!({"op": "receipt", "rid": 4}));
        let mut ended = Vec::new();
        for _ in 0..2 {
            let e = n.reply(WAIT).await;
            assert_eq!(
                (&e["op"], &e["code"]),
                (&json!("ended"), &json!("forbidden")),
                "{e}"
            );
            ended.push(e["sub"].as_str().unwrap().to_owned());
        }
        ended.sort();
        assert_eq!(ended, ["b", "d"]);
        // cmd/b and the durable cmd/# get nothing; cmd/a still does.
        for topic in ["cmd/b", "cmd/a"] {
            let r = call(
                b.addr,
                "POST",
                &format!("/topics/{topic}"),
                Some(&root),
                topic,
            );
            assert_eq!(r.status, 202, "{}", r.body);
        }
        match n.recv(WAIT).await {
            Incoming::Frame(m) => {
                assert_eq!(
                    (&m["op"], &m["sub"]),
                    (&json!("message"), &json!("a")),
                    "{m}"
                );
            }
            _ => panic!("no message for the subscription still allowed"),
        }
        n.still_works(5).await;
        // The ended ids are free again; the narrowed rights still hold.
        n.send(&json!({"op": "subscribe", "id": "b", "filter": "cmd/b", "rid": 6}))
            .await;
        assert_eq!(n.reply(WAIT).await["code"], "forbidden");
    });
    // The durable subscription's queue stays, without its consumer, and
    // keeps what it collected (cmd/b and cmd/a).
    let r = call(b.addr, "GET", "/queues", Some(&root), "");
    let q = &r.body[0];
    assert!(
        q["name"].as_str().unwrap().ends_with("device-3/d"),
        "{}",
        r.body
    );
    assert_eq!(
        (&q["consumers"], &q["depth"]),
        (&json!(0), &json!(2)),
        "{}",
        r.body
    );
}

/// A JWKS reload that withdraws a key ends the native and MQTT sessions
/// whose tokens it verified (an `unauthorized` error, then 4403), and
/// leaves sessions verified by the keys that stay.
#[test]
fn a_withdrawn_jwks_key_ends_the_sessions_it_verified() {
    use base64::Engine as _;
    let tmp = tempfile::tempdir().unwrap();
    let jwks = tmp.path().join("jwks.json");
    let secret = |kid: &str| format!("{kid}-secret-0123456789abcdef-0123456789");
    let jwk = |kid: &str| {
        let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret(kid));
        format!(r#"{{"kty":"oct","alg":"HS256","kid":"{kid}","k":"{k}"}}"#)
    };
    let write = |kids: &[&str]| {
        let keys: Vec<String> = kids.iter().map(|k| jwk(k)).collect();
        std::fs::write(&jwks, format!(r#"{{"keys":[{}]}}"#, keys.join(","))).unwrap();
    };
    write(&["old", "kept"]);
    let signed = |kid: &str, sub: &str| {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(
            &header,
            &json!({"sub": sub, "exp": unix_now() + 600, "wharf": {"publish": ["#"], "subscribe": ["#"]}}),
            &jsonwebtoken::EncodingKey::from_secret(secret(kid).as_bytes()),
        )
        .unwrap()
    };
    let path = jwks.clone();
    let b = TestBroker::start(|c| {
        c.auth.jwt.jwks_file = path;
        c.auth.max_failures = 100;
    });
    let (old, kept) = (signed("old", "dev-old"), signed("kept", "dev-kept"));
    block_on(async {
        let mut gone = Native::open(&b, Format::Json, "", None).await;
        gone.hello("gone", Some(&old)).await;
        let mut stays = Native::open(&b, Format::Bincode, "", None).await;
        stays.hello("stays", Some(&kept)).await;
        let mqtt = mqtt_opts("gone-mqtt", Some(("ignored".into(), old.clone())));
        let mut m = MqttClient::connect(&mqtt_url(&b), mqtt).await.unwrap();

        write(&["kept"]);
        b.reload();
        // The reload has run once the old key is refused over HTTP.
        let reloaded = common::eventually_every(Duration::from_millis(20), WAIT, || {
            call(b.addr, "POST", "/topics/t", Some(&bearer(&old)), "x").status == 401
        })
        .await;
        assert!(reloaded, "the reload did not withdraw the key");

        // The next thing the withdrawn sessions send is answered by the
        // error and the close.
        gone.send(&json!({"op": "ping", "rid": 1})).await;
        let e = gone.reply(WAIT).await;
        assert_eq!(
            (&e["op"], &e["code"]),
            (&json!("error"), &json!("unauthorized")),
            "{e}"
        );
        assert_eq!(gone.close_code(WAIT).await, Some(4403));
        let _ = m.publish("t/x", &b"after"[..], 0, false).await;
        assert_eq!(m.closed().await, Some(4403));
        stays.still_works(2).await;
    });
}

/// A principal name with a wildcard or a level separator would turn a
/// `%u` grant into a grant over other principals' topics: a JWT `sub`,
/// an MQTT user name and an HTTP Basic user name of `+`, `#` or `a/b`
/// are refused on every way in (HTTP, native, typed sockets' upgrade,
/// MQTT), and no such principal publishes into `dev/victim/`.
#[test]
fn principal_names_with_wildcards_are_refused_on_every_way_in() {
    let b = TestBroker::start(|c| {
        configure(c);
        c.auth.max_failures = 1000;
    });
    let rights = json!({"publish": ["dev/%u/#"], "subscribe": ["dev/%u/#"]});
    let exp = unix_now() + 600;
    block_on(async {
        for name in ["+", "#", "dev/victim", "victim/#"] {
            let token = jwt(name, exp, rights.clone());
            // HTTP, as a bearer token and as a Basic password.
            for auth in [bearer(&token), basic("x", &token), basic(name, SVC_TOKEN)] {
                let r = call(b.addr, "POST", "/topics/dev/victim/x", Some(&auth), "x");
                assert_eq!(r.status, 401, "{name:?} {auth}: {}", r.body);
            }
            // The WebSocket upgrade.
            let head = upgrade_head(b.addr, &format!("/ws?token={token}"), "");
            assert_eq!(status_of(&head), 401, "{name:?}: {head}");
            // Native hello.
            let mut n = Native::open(&b, Format::Json, "", None).await;
            n.refused(
                &json!({"op": "hello", "token": token}),
                "unauthorized",
                4401,
            )
            .await;
            // MQTT: the JWT as the password, and the name as a user name.
            let e = connack_refusal(&b, Some(("x".into(), token.clone()))).await;
            assert!(e.ends_with("code 4"), "{name:?}: {e}");
            let e = connack_refusal(&b, Some((name.into(), SVC_TOKEN.into()))).await;
            assert!(e.ends_with("code 4"), "{name:?} as MQTT user: {e}");
        }
    });
    // A well-formed sub still gets its own topics, and only those.
    let token = jwt("victim", exp, rights);
    let r = call(
        b.addr,
        "POST",
        "/topics/dev/victim/x",
        Some(&bearer(&token)),
        "x",
    );
    assert_eq!(r.status, 202, "{}", r.body);
    let r = call(
        b.addr,
        "POST",
        "/topics/dev/other/x",
        Some(&bearer(&token)),
        "x",
    );
    assert_eq!(r.status, 403, "{}", r.body);
}
