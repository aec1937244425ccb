//! The admin API's overview, topics and session routes over HTTP.

use crate::common;

use std::time::Duration;

use common::{TestBroker, block_on, http};
use serde_json::Value;
use wharf::client::{Client, ClientOptions};

const T: Duration = Duration::from_secs(10);

fn get(b: &TestBroker, path: &str) -> (u16, Value) {
    let (status, body) = http(b.addr, "GET", path, "");
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[test]
fn overview_topics_and_closing_a_session() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        let _s = c.subscribe("rooms/+/temp").await.unwrap();
        for room in ["a", "b", "c"] {
            c.publish_confirmed(&format!("rooms/{room}/temp"), b"20".to_vec())
                .await
                .unwrap();
        }
        c.publish_confirmed("other/x", b"1".to_vec()).await.unwrap();

        let (status, o) = get(&b, "/admin/overview");
        assert_eq!(status, 200, "{o}");
        assert_eq!(o["sessions"]["native"], 1);
        assert!(o["published"].as_u64().unwrap() >= 4, "{o}");
        assert!(o["topics"].as_u64().unwrap() >= 3, "{o}");

        // Two pages of the rooms, in name order.
        let (status, p1) = get(&b, "/admin/topics?filter=rooms/%23&limit=2");
        assert_eq!(status, 200, "{p1}");
        let names: Vec<&str> = p1["topics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["rooms/a/temp", "rooms/b/temp"]);
        assert_eq!(p1["topics"][0]["subscribers"], 1);
        assert_eq!(p1["topics"][0]["published"], 1);
        let next = p1["next"].as_str().unwrap();
        let (_, p2) = get(
            &b,
            &format!("/admin/topics?filter=rooms/%23&limit=2&after={next}"),
        );
        assert_eq!(p2["topics"][0]["name"], "rooms/c/temp");
        assert!(p2.get("next").is_none(), "the last page: {p2}");
        let (status, bad) = get(&b, "/admin/topics?limit=0");
        assert_eq!(
            (status, bad["error"]["code"].as_str()),
            (400, Some("invalid_query"))
        );
        let (status, bad) = get(&b, "/admin/topics?filter=a/%23/b");
        assert_eq!(
            (status, bad["error"]["code"].as_str()),
            (400, Some("invalid_filter"))
        );

        // Close the session from outside: its client sees the close.
        let (_, sessions) = get(&b, "/admin/sessions");
        assert_eq!(sessions[0]["subscriptions"], 1, "{sessions}");
        assert_eq!(sessions[0]["consumers"], 0, "{sessions}");
        let id = sessions[0]["id"].as_str().unwrap().to_owned();
        let (status, _) = http(
            b.addr,
            "POST",
            &format!("/admin/sessions/{id}/close?drain=true"),
            "",
        );
        assert_eq!(status, 204);
        assert!(
            common::eventually_async(T, || async { c.ping().await.is_err() }).await,
            "the closed session still answers"
        );
        // Its client saw the close as the socket went; the broker forgets
        // the session as its tasks end, a moment later.
        let close = format!("/admin/sessions/{id}/close");
        assert!(
            common::eventually_async(T, || async { http(b.addr, "POST", &close, "").0 == 404 })
                .await,
            "the closed session is still listed"
        );
        let (status, _) = http(b.addr, "POST", "/admin/sessions/not-a-uuid/close", "");
        assert_eq!(status, 404);
    });
}

#[test]
fn admin_routes_need_the_admin_right() {
    use wharf::config::auth::{Permissions, TokenConfig};
    let b = TestBroker::start(|c| {
        c.auth.tokens.push(TokenConfig {
            name: "app".into(),
            token_sha256: wharf::auth::token_digest("app-token"),
            allow: Permissions {
                publish: vec!["#".into()],
                ..Permissions::default()
            },
        });
    });
    let auth = "Authorization: Bearer app-token\r\n";
    for (method, path) in [
        ("GET", "/admin/overview"),
        ("GET", "/admin/topics"),
        (
            "POST",
            "/admin/sessions/0190a6f0-0000-7000-8000-000000000001/close",
        ),
    ] {
        let (status, _, body) = common::http_request(b.addr, method, path, auth, "");
        assert_eq!(status, 403, "{method} {path}: {body}");
        let (status, _, _) = common::http_request(b.addr, method, path, "", "");
        assert_eq!(status, 401, "{method} {path} without credentials");
    }
}
