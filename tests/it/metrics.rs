//! `GET /metrics` over real sockets: the counters move with the traffic
//! that causes them, queue series are capped, and the route is the
//! admin's.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::{TestBroker, block_on, http};
use wharf::client::mqtt::{MqttClient, MqttOptions};
use wharf::client::{Client, ClientOptions};

const T: Duration = Duration::from_secs(10);

/// The value of the series `name` (with its labels, as printed:
/// `wharf_sessions{protocol="native"}`), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, v) = l.rsplit_once(' ')?;
        (name == series).then(|| v.parse().ok())?
    })
}

fn scrape(b: &TestBroker) -> String {
    let (status, body) = http(b.addr, "GET", "/metrics", "");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.trim_end().ends_with("# EOF"),
        "OpenMetrics ends with # EOF"
    );
    body
}

#[test]
fn counters_follow_the_traffic() {
    let b = TestBroker::start(|_| {});
    let before = scrape(&b);
    let published_before = value(&before, "wharf_messages_published_total").unwrap();
    block_on(async {
        let sub = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        let mut s = sub.subscribe("metrics/+").await.unwrap();
        let publ = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        for i in 0..10u8 {
            publ.publish_confirmed("metrics/a", vec![i]).await.unwrap();
        }
        for _ in 0..10 {
            s.recv_timeout(T).await.expect("a delivery");
        }
        // A publish nobody receives.
        publ.publish_confirmed("nobody/here", b"x".to_vec())
            .await
            .unwrap();
        let mut m = MqttClient::connect(
            &format!("ws://{}/mqtt", b.addr),
            MqttOptions {
                client_id: "metrics-mqtt".into(),
                ..MqttOptions::default()
            },
        )
        .await
        .unwrap();
        m.publish("metrics/b", Bytes::from_static(b"m"), 1, false)
            .await
            .unwrap();
        s.recv_timeout(T).await.expect("the MQTT publish");
        publ.enqueue("metrics-q", b"job".to_vec()).await.unwrap();
        let text = scrape(&b);
        let published = value(&text, "wharf_messages_published_total").unwrap();
        assert_eq!(published - published_before, 12.0, "10 + unrouted + MQTT");
        assert!(value(&text, "wharf_deliveries_total").unwrap() >= 11.0);
        assert!(value(&text, "wharf_publishes_unrouted_total").unwrap() >= 1.0);
        assert_eq!(
            value(&text, r#"wharf_connections_total{protocol="native"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(&text, r#"wharf_connections_total{protocol="mqtt_ws"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(&text, r#"wharf_sessions{protocol="native"}"#),
            Some(2.0)
        );
        assert_eq!(
            value(&text, r#"wharf_sessions{protocol="mqtt"}"#),
            Some(1.0)
        );
        assert!(value(&text, r#"wharf_frames_received_total{protocol="native"}"#).unwrap() >= 13.0);
        assert!(value(&text, "wharf_sent_bytes_total").unwrap() > 0.0);
        assert_eq!(
            value(&text, r#"wharf_queue_ready{queue="metrics-q"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(&text, r#"wharf_queue_enqueued_total{queue="metrics-q"}"#),
            Some(1.0)
        );
        assert!(value(&text, "wharf_topics").unwrap() >= 1.0);
        assert!(value(&text, "wharf_process_resident_memory_bytes").unwrap() > 1e6);
        assert!(value(&text, "wharf_process_open_fds").unwrap() >= 3.0);
        assert!(value(&text, "wharf_store_disk_bytes").unwrap() > 0.0);
        m.disconnect().await.unwrap();
    });
}

#[test]
fn queue_series_are_capped_with_an_other_bucket() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        for i in 0..105 {
            c.enqueue(&format!("q{i:03}"), b"x".to_vec()).await.unwrap();
        }
    });
    let text = scrape(&b);
    let ready_series = text
        .lines()
        .filter(|l| l.starts_with("wharf_queue_ready{"))
        .count();
    assert_eq!(ready_series, 101, "100 queues and other");
    assert_eq!(
        value(&text, r#"wharf_queue_ready{queue="other"}"#),
        Some(5.0)
    );
    // Each queue has its dead-letter queue.
    assert_eq!(value(&text, "wharf_queues"), Some(210.0));
}

/// `GET /metrics` with a bearer token: (status, body).
fn scrape_as(b: &TestBroker, token: &str) -> (u16, String) {
    let auth = format!("Authorization: Bearer {token}\r\n");
    let (status, _, body) = common::http_request(b.addr, "GET", "/metrics", &auth, "");
    (status, body)
}

#[test]
fn metrics_are_the_admins() {
    use wharf::config::auth::{Permissions, TokenConfig};
    let token = |name: &str, admin: bool| TokenConfig {
        name: name.into(),
        token_sha256: wharf::auth::token_digest(&format!("{name}-token")),
        allow: Permissions {
            publish: vec!["#".into()],
            admin,
            ..Permissions::default()
        },
    };
    let b = TestBroker::start(|c| {
        c.auth.tokens.push(token("app", false));
        c.auth.tokens.push(token("ops", true));
    });
    let (status, _) = http(b.addr, "GET", "/metrics", "");
    assert_eq!(status, 401);
    assert_eq!(scrape_as(&b, "wrong").0, 401);
    assert_eq!(scrape_as(&b, "app-token").0, 403);
    let (status, text) = scrape_as(&b, "ops-token");
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("wharf_auth_failures_total 1"),
        "the wrong token counted: {text}"
    );
}

#[test]
fn operator_counters_move_and_the_exposition_parses() {
    let b = TestBroker::start(|_| {});
    block_on(async {
        let c = Client::connect(&b.ws_url(), ClientOptions::default())
            .await
            .unwrap();
        for i in 0..3u8 {
            c.enqueue("mq", vec![i]).await.unwrap();
        }
        let mut consumer = c.consume("mq", 3).await.unwrap();
        let mut first = Vec::new();
        for _ in 0..3 {
            first.push(consumer.recv_timeout(T).await.expect("a delivery"));
        }
        c.nack(consumer.id(), &[first[0].id], Some(0))
            .await
            .unwrap();
        let again = consumer.recv_timeout(T).await.expect("the redelivery");
        assert_eq!((again.seq, again.count), (first[0].seq, 2));
        c.ack(consumer.id(), &[again.id, first[1].id, first[2].id])
            .await
            .unwrap();
        c.cancel(consumer).await.unwrap();
        for i in 0..2u8 {
            c.enqueue("mq", vec![i]).await.unwrap();
        }
        let _sub = c.subscribe("kept/+").await.unwrap();
        c.publish_retained("kept/a", b"1".to_vec()).await.unwrap();
        c.publish_retained("kept/b", b"2".to_vec()).await.unwrap();
        // An empty retained publish clears it.
        c.publish_retained("kept/b", Vec::new()).await.unwrap();
        let text = scrape(&b);
        assert_eq!(value(&text, "wharf_retained_messages"), Some(1.0));
        assert_eq!(value(&text, "wharf_subscriptions"), Some(1.0));
    });
    let (status, _) = http(b.addr, "DELETE", "/queues/mq/messages", "");
    assert_eq!(status, 200);
    let job = r#"{"kind":"mail","entity_id":"0190a6f0-0000-7000-8000-00000000e001","data":1}"#;
    assert_eq!(http(b.addr, "POST", "/jobs", job).0, 201);
    let (_, w) = http(b.addr, "POST", "/workers", r#"{"kinds":["mail"]}"#);
    let w: serde_json::Value = serde_json::from_str(&w).unwrap();
    let stale = format!(
        r#"{{"worker_id":{},"token":7,"outcome":"succeeded"}}"#,
        w["worker_id"]
    );
    let unknown_running = "/jobs/0190a6f0-0000-7000-8000-000000000001/outcome";
    assert_eq!(http(b.addr, "POST", unknown_running, &stale).0, 404);
    let (_, jobs) = http(b.addr, "GET", "/jobs", "");
    let jobs: serde_json::Value = serde_json::from_str(&jobs).unwrap();
    let id = jobs["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        http(b.addr, "POST", &format!("/jobs/{id}/outcome"), &stale).0,
        409
    );

    let text = scrape(&b);
    for (series, want) in [
        (r#"wharf_queue_nacked_total{queue="mq"}"#, 1.0),
        (r#"wharf_queue_redelivered_total{queue="mq"}"#, 1.0),
        (r#"wharf_queue_returned_total{queue="mq"}"#, 1.0),
        (r#"wharf_queue_purged_total{queue="mq"}"#, 2.0),
        (r#"wharf_queue_acked_total{queue="mq"}"#, 3.0),
        (r#"wharf_jobs_by_status{kind="mail",status="queued"}"#, 1.0),
        ("wharf_job_stale_outcomes_total", 1.0),
    ] {
        assert_eq!(value(&text, series), Some(want), "{series}");
    }
    assert!(value(&text, r#"wharf_taskq_runs_total{where="inline"}"#).unwrap() > 0.0);
    assert!(value(&text, "wharf_store_commit_batch_count").unwrap() >= 5.0);
    assert!(value(&text, "wharf_store_durable_seconds_count").unwrap() >= 1.0);
    assert!(value(&text, "wharf_taskq_deepest_ever").is_some());

    // A Prometheus parser nobody here wrote reads the whole exposition.
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &text).unwrap();
    let python = std::env::var("WHARF_PYTHON").unwrap_or_else(|_| "python3".into());
    let parse = "import sys\n\
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as p\n\
        names = [f.name for f in p(open(sys.argv[1]).read())]\n\
        print(len(names), ' '.join(names))";
    let out = std::process::Command::new(&python)
        .args(["-c", parse])
        .arg(file.path())
        .output()
        .expect("run python (scripts/test installs prometheus-client in its venv)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the exposition: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for family in [
        "wharf_messages_published",
        "wharf_store_commit_batch",
        "wharf_jobs_by_status",
        "wharf_queue_oldest_message_age_seconds",
    ] {
        assert!(stdout.contains(family), "{family} not parsed: {stdout}");
    }
}
