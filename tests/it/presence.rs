//! Presence over real sockets: who is subscribed to a topic under a
//! `[[presence]]` entry (native and MQTT subscribers), by HTTP and the
//! native `presence` operation, a page at a time; join and leave events
//! on `$presence/<topic>`; and who may see them.

use crate::common::{TestBroker, block_on, http, http_request, raw_mqtt};

use std::time::Duration;

use wharf::client::{Client, ClientError, ClientOptions};
use wharf::config::PresenceDecl;
use wharf::config::auth::{Permissions, TokenConfig};
use wharf::protocol::frame::ErrorCode;
use wharf::protocol::mqtt::{self, Packet, SubOptions, Subscribe};

const T: Duration = Duration::from_secs(10);

fn rooms(c: &mut wharf::Config) {
    c.presence.push(PresenceDecl {
        filter: "room/#".into(),
    });
}

async fn named(b: &TestBroker, id: &str) -> Client {
    Client::connect(
        &b.ws_url(),
        ClientOptions {
            client_id: Some(id.into()),
            ..ClientOptions::default()
        },
    )
    .await
    .expect("connect")
}

fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// `GET /topics/{topic}/presence`: (count, client ids).
fn members(b: &TestBroker, topic: &str) -> (u64, Vec<String>) {
    let (code, body) = http(b.addr, "GET", &format!("/topics/{topic}/presence"), "");
    assert_eq!(code, 200, "{body}");
    let v = json(&body);
    let ids = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["client_id"].as_str().unwrap().to_owned())
        .collect();
    (v["count"].as_u64().unwrap(), ids)
}

/// The next presence event a watcher gets: (event, client id).
async fn event(watch: &mut wharf::client::Subscription) -> (String, String) {
    let m = watch.recv_timeout(T).await.expect("a presence event");
    let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
    (
        v["event"].as_str().unwrap().to_owned(),
        v["client_id"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn presence_lists_who_subscribes_and_announces_joins_and_leaves() {
    let b = TestBroker::start_tcp(rooms);
    block_on(async {
        let watcher = named(&b, "watcher").await;
        let mut watch = watcher.subscribe("$presence/room/1").await.unwrap();
        let (mut clients, mut subs) = (Vec::new(), Vec::new());
        for id in ["carol", "alice", "bob"] {
            let c = named(&b, id).await;
            subs.push(c.subscribe("room/1").await.unwrap());
            assert_eq!(event(&mut watch).await, ("join".into(), id.into()));
            clients.push(c);
        }
        // A second subscription of a connection is not a second member.
        let _again = clients[0].subscribe("room/1").await;
        // Nor does a wildcard subscription count.
        let _wide = watcher.subscribe("room/#").await.unwrap();
        let (count, ids) = members(&b, "room/1");
        assert_eq!(
            (count, ids),
            (3, vec!["alice".into(), "bob".into(), "carol".into()])
        );
        let (_, body) = http(b.addr, "GET", "/topics/room/1/presence", "");
        let first = &json(&body)["members"][0];
        assert_eq!(first["principal"], "anonymous", "{body}");
        assert!(first["since_ms"].as_u64().unwrap() > 1_700_000_000_000);
        // Over the native protocol too.
        let page = watcher.presence("room/1", None, 10).await.unwrap();
        assert_eq!(page.count, 3);
        assert_eq!(page.members[1].client_id, "bob");
        // bob unsubscribes, alice's connection goes.
        let bob = clients.remove(2);
        let sub = subs.remove(2);
        bob.unsubscribe(sub).await.unwrap();
        assert_eq!(event(&mut watch).await, ("leave".into(), "bob".into()));
        let alice = clients.remove(1);
        alice.close(false).await.unwrap();
        assert_eq!(event(&mut watch).await, ("leave".into(), "alice".into()));
        // An MQTT subscriber counts as well.
        let (mut m, _) = raw_mqtt::Raw::connect(
            b.mqtt_addr.unwrap(),
            raw_mqtt::hello_at(mqtt::LEVEL_5, "dave"),
        );
        m.send(&Packet::Subscribe(Subscribe {
            pid: 1,
            filters: vec![("room/1".into(), SubOptions::qos(0))],
            props: Default::default(),
        }));
        assert!(matches!(m.recv(), Some(Packet::SubAck(_))));
        assert_eq!(event(&mut watch).await, ("join".into(), "dave".into()));
        assert_eq!(
            members(&b, "room/1"),
            (2, vec!["carol".into(), "dave".into()])
        );
        drop(m);
        assert_eq!(event(&mut watch).await, ("leave".into(), "dave".into()));
        assert_eq!(members(&b, "room/1"), (1, vec!["carol".into()]));
        // Nobody publishes presence events, even where every topic is open.
        match watcher
            .publish_confirmed("$presence/room/1", b"{}".to_vec())
            .await
        {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn a_crowded_topic_answers_a_count_and_a_page() {
    let b = TestBroker::start(rooms);
    block_on(async {
        let mut clients = Vec::new();
        for i in 0..25 {
            let c = named(&b, &format!("c{i:02}")).await;
            let s = c.subscribe("room/big").await.unwrap();
            clients.push((c, s));
        }
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = clients[0]
                .0
                .presence("room/big", after.as_deref(), 10)
                .await
                .unwrap();
            assert_eq!(page.count, 25);
            assert!(page.members.len() <= 10);
            seen.extend(page.members.into_iter().map(|m| m.client_id));
            pages += 1;
            match page.next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(pages, 3);
        assert_eq!(
            seen,
            (0..25).map(|i| format!("c{i:02}")).collect::<Vec<_>>()
        );
        // Over HTTP, the same cursor.
        let (code, body) = http(b.addr, "GET", "/topics/room/big/presence?limit=5", "");
        assert_eq!(code, 200, "{body}");
        let next = json(&body)["next"].as_str().unwrap().to_owned();
        let (_, body) = http(
            b.addr,
            "GET",
            &format!(
                "/topics/room/big/presence?limit=5&after={}",
                next.replace(':', "%3A")
            ),
            "",
        );
        assert_eq!(json(&body)["members"][0]["client_id"], "c05", "{body}");
        // Bad limits and topics without presence.
        match clients[0].0.presence("room/big", None, 0).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::InvalidField),
            other => panic!("{other:?}"),
        }
        match clients[0].0.presence("lobby", None, 10).await {
            Err(ClientError::Server { code, message }) => {
                assert_eq!(code, ErrorCode::InvalidField, "{message}")
            }
            other => panic!("{other:?}"),
        }
        let (code, body) = http(
            b.addr,
            "GET",
            "/topics/room/big/presence?after=nonsense",
            "",
        );
        assert_eq!(
            (code, json(&body)["error"]["code"].as_str()),
            (400, Some("invalid_field")),
            "{body}"
        );
        let (code, body) = http(b.addr, "GET", "/topics/lobby/presence", "");
        assert_eq!(
            (code, json(&body)["error"]["code"].as_str()),
            (404, Some("no_presence"))
        );
        // A topic nobody subscribes to has no members.
        assert_eq!(members(&b, "room/empty"), (0, vec![]));
    });
}

#[test]
fn seeing_presence_needs_the_subscribe_right_and_nobody_publishes_its_events() {
    let b = TestBroker::start(|c| {
        rooms(c);
        c.auth.anonymous = Some(false);
        c.auth.tokens.push(TokenConfig {
            name: "member".into(),
            token_sha256: wharf::auth::token_digest("member-token"),
            allow: Permissions {
                subscribe: vec!["room/1".into()],
                publish: vec!["#".into()],
                ..Permissions::default()
            },
        });
    });
    let bearer = "Authorization: Bearer member-token\r\n";
    let get = |path: &str| http_request(b.addr, "GET", path, bearer, "").0;
    assert_eq!(get("/topics/room/1/presence"), 200);
    assert_eq!(get("/topics/room/2/presence"), 403);
    let (code, _, body) = http_request(b.addr, "POST", "/topics/$presence/room/1", bearer, "{}");
    assert_eq!(
        code, 403,
        "only the broker publishes presence events: {body}"
    );
    block_on(async {
        let c = Client::connect(
            &b.ws_url(),
            ClientOptions {
                token: Some("member-token".into()),
                ..ClientOptions::default()
            },
        )
        .await
        .unwrap();
        assert!(c.subscribe("$presence/room/1").await.is_ok());
        match c.subscribe("$presence/room/2").await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            other => panic!("{:?}", other.map(|_| ())),
        }
        match c.presence("room/2", None, 10).await {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            other => panic!("{other:?}"),
        }
        match c
            .publish_confirmed("$presence/room/1", b"{}".to_vec())
            .await
        {
            Err(ClientError::Server { code, .. }) => assert_eq!(code, ErrorCode::Forbidden),
            other => panic!("{other:?}"),
        }
    });
}
