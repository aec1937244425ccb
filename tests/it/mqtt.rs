//! MQTT over WebSocket with a client nobody here wrote: Eclipse Paho
//! (Python paho-mqtt, installed by scripts/test in a virtual environment
//! whose interpreter it names in `WHARF_PYTHON`), against a
//! broker started by the test on loopback.

use crate::common;

use std::time::Duration;

use common::TestBroker;

/// Runs an interop script of tests/interop against `b`'s HTTP port.
fn interop(program: &str, script: &str, b: &TestBroker, more: &[&str]) {
    common::interop(program, script, b.addr.port(), more);
}

fn paho(b: &TestBroker, scenario: &str) {
    interop(&common::python(), "mqtt_paho.py", b, &[scenario]);
}

/// MQTT.js (npm), a second client nobody here wrote.
#[test]
fn mqtt_js_qos_round_trips_and_retained() {
    let b = TestBroker::start(|_| {});
    interop("node", "mqtt_js.mjs", &b, &[]);
}

/// A broker on wss:// (a run-time test CA) with a password user `alice`
/// (publish and subscribe under `secure/alice/`) and HS256 JWTs, and a
/// JWT whose claim allows `jwt/#`: (broker, CA file, JWT, temp dir).
fn secure_broker() -> (TestBroker, String, String, tempfile::TempDir) {
    use wharf::config::auth::{JwtKeyConfig, Permissions, UserConfig};
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = common::make_certs(dir.path());
    const SECRET: &str = "interop-secret-0123456789abcdef-0123";
    let b = TestBroker::start(|c| {
        c.server.tls.cert = cert;
        c.server.tls.key = key;
        let mine = vec!["secure/%u/#".to_owned()];
        c.auth.users.push(UserConfig {
            name: "alice".into(),
            password_hash: wharf::auth::hash_password(b"wonderland").unwrap(),
            allow: Permissions {
                publish: mine.clone(),
                subscribe: mine,
                ..Permissions::default()
            },
        });
        c.auth.jwt.keys.push(JwtKeyConfig {
            algorithm: "HS256".into(),
            secret: SECRET.into(),
            ..JwtKeyConfig::default()
        });
    });
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let claims = serde_json::json!({
        "sub": "device-1", "exp": exp,
        "wharf": {"publish": ["jwt/#"], "subscribe": ["jwt/#"]},
    });
    let jwt = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    (b, ca.display().to_string(), jwt, dir)
}

/// Eclipse Paho over wss:// with a password and with a JWT; a bad
/// password gets CONNACK 4, none CONNACK 5, an uncovered filter 0x80.
#[test]
fn paho_over_wss_with_password_and_jwt() {
    let (b, ca, jwt, _dir) = secure_broker();
    let python = std::env::var("WHARF_PYTHON").unwrap_or_else(|_| "python3".into());
    interop(&python, "mqtt_paho.py", &b, &["secure", &ca, &jwt]);
}

/// The same with MQTT.js.
#[test]
fn mqtt_js_over_wss_with_password_and_jwt() {
    let (b, ca, jwt, _dir) = secure_broker();
    interop("node", "mqtt_js.mjs", &b, &["secure", &ca, &jwt]);
}

#[test]
fn paho_qos_0_1_2_round_trips() {
    let b = TestBroker::start(|_| {});
    paho(&b, "qos");
}

#[test]
fn paho_wildcards_and_dollar_topics() {
    let b = TestBroker::start(|_| {});
    paho(&b, "wildcards");
}

#[test]
fn paho_retained_messages() {
    let b = TestBroker::start(|_| {});
    paho(&b, "retained");
}

#[test]
fn paho_will_on_abrupt_disconnect_only() {
    let b = TestBroker::start(|_| {});
    paho(&b, "will");
}

#[test]
fn paho_persistent_session_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let b = TestBroker::start_in(&data, |_| {});
    paho(&b, "persist1");
    // The copies are written asynchronously: wait for all of them.
    assert!(common::wait_until(Duration::from_secs(10), || {
        let (_, body) = common::http(b.addr, "GET", "/queues", "");
        let queues: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let kept: u64 = queues
            .as_array()
            .into_iter()
            .flatten()
            .filter(|q| {
                q["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("$durable/mqtt:paho-persistent/"))
            })
            .filter_map(|q| q["depth"].as_u64())
            .sum();
        kept == 150
    }));
    b.stop().unwrap();
    let b = TestBroker::start_in(&data, |_| {});
    paho(&b, "persist2");
}

/// MQTT 5 with Eclipse Paho over WebSocket: user properties, content
/// type, response topic and correlation data between two clients (a
/// request and its reply), PUBACK 0x10 and 0x99, CONNACK's properties
/// and an assigned client id.
#[test]
fn paho_v5_properties_round_trip() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_properties");
}

/// MQTT 5 session expiry with Paho: kept while away, resumed with
/// session present; expiry 0 and a passed interval end it.
#[test]
fn paho_v5_session_expiry() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_session");
}

/// MQTT 5 subscription options with Paho: no local, retain as
/// published, retain handling 0/1/2, subscription identifiers; UNSUBACK
/// 0x11 and SUBACK 0x8F.
#[test]
fn paho_v5_subscription_options() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_sub_options");
}

/// A second Paho connection with the same client id: the first gets
/// DISCONNECT 0x8E, the second the session and its subscription.
#[test]
fn paho_v5_session_takeover() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_takeover");
}

/// MQTT 5 wills with Paho: after the will delay, not at all when the
/// client comes back in time, and on DISCONNECT 0x04.
#[test]
fn paho_v5_will_delay() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_will");
}

/// MQTT 5 flow control with Paho: the client's receive maximum (2, acks
/// by hand) and maximum packet size (256) are kept.
#[test]
fn paho_v5_receive_maximum_and_maximum_packet_size() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_flow");
}

/// A silent Paho client (keep-alive 1 s) gets DISCONNECT 0x8D.
#[test]
fn paho_v5_keep_alive_timeout() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_keepalive");
}

/// A connected Paho client gets DISCONNECT 0x8B when the broker stops.
#[test]
fn paho_v5_server_shutting_down() {
    let b = TestBroker::start(|_| {});
    let port = b.addr.port();
    common::paho_through_shutdown(b, port, &["v5_shutdown"]);
}

/// No local and retain as published on a persistent session's (session
/// expiry 60) subscription, with Paho.
#[test]
fn paho_v5_persistent_subscription_options() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_persistent_options");
}

/// A Paho connection with a delayed will, taken over by a new connection
/// with Clean Start 1: its session ends, so the will is sent.
#[test]
fn paho_v5_takeover_with_clean_start_sends_the_delayed_will() {
    let b = TestBroker::start(|_| {});
    paho(&b, "v5_takeover_will");
}

/// MQTT.js at protocol version 5 over WebSocket: user properties, topic
/// aliases both ways, subscription identifiers, message expiry.
#[test]
fn mqtt_js_v5_properties_aliases_and_expiry() {
    let b = TestBroker::start(|_| {});
    interop("node", "mqtt_js.mjs", &b, &["v5", "ws"]);
}

mod own_client {
    use super::*;
    use bytes::Bytes;
    use common::block_on;
    use wharf::client::mqtt::{MqttClient, MqttOptions};
    use wharf::client::{Client, ClientOptions};

    fn url(b: &TestBroker) -> String {
        format!("ws://{}/mqtt", b.addr)
    }

    fn opts(id: &str) -> MqttOptions {
        MqttOptions {
            client_id: id.into(),
            ..MqttOptions::default()
        }
    }

    /// Keep-alive on time (MQTT-3.1.2-24): a client with a 2 s keep-alive
    /// that falls silent is cut, and its will published, 1.5 x 2 s after
    /// its last packet, not at the next 20 s ping tick.
    #[test]
    fn a_silent_client_is_cut_and_its_will_sent_at_one_and_a_half_keep_alives() {
        use std::time::Instant;
        use wharf::protocol::mqtt::Will;
        let b = TestBroker::start(|c| c.session.ping_interval_s = 20);
        block_on(async {
            let native = Client::connect(&b.ws_url(), ClientOptions::default())
                .await
                .unwrap();
            let mut wills = native.subscribe("wills/#").await.unwrap();
            let mut silent = MqttClient::connect(
                &url(&b),
                MqttOptions {
                    client_id: "silent".into(),
                    keep_alive: 2,
                    will: Some(Will {
                        topic: "wills/silent".into(),
                        payload: Bytes::from_static(b"gone"),
                        qos: 0,
                        retain: false,
                        props: Default::default(),
                    }),
                    ..MqttOptions::default()
                },
            )
            .await
            .unwrap();
            // Its last packet: a PINGREQ answered now; then nothing.
            silent.ping().await.unwrap();
            let last = Instant::now();
            let will = wills
                .recv_timeout(Duration::from_secs(10))
                .await
                .expect("the will is published");
            let after = last.elapsed();
            assert_eq!(will.payload, b"gone");
            assert!(
                after >= Duration::from_millis(2900) && after <= Duration::from_millis(3800),
                "the will came {after:?} after the last packet (keep-alive 2 s)"
            );
            drop(silent);
        });
    }

    /// MQTT clients that connect to `/` (MQTT.js's default) are served
    /// when they offer the `mqtt` subprotocol; `/` is 404 to the rest.
    #[test]
    fn mqtt_is_served_at_the_root_path_too() {
        let b = TestBroker::start(|_| {});
        block_on(async {
            let root = format!("ws://{}/", b.addr);
            let mut m = MqttClient::connect(&root, opts("root")).await.unwrap();
            assert_eq!(m.subscribe("root/t", 0).await.unwrap(), 0);
            m.publish("root/t", Bytes::from_static(b"hi"), 0, false)
                .await
                .unwrap();
            assert_eq!(&m.recv().await.unwrap().payload[..], b"hi");
        });
        let (status, body) = common::http(b.addr, "GET", "/", "");
        assert_eq!(status, 404, "{body}");
    }

    #[test]
    fn native_and_mqtt_clients_share_topics_byte_for_byte() {
        let b = TestBroker::start(|_| {});
        block_on(async {
            let mut m = MqttClient::connect(&url(&b), opts("m1")).await.unwrap();
            assert_eq!(m.subscribe("mixed/+", 1).await.unwrap(), 1);
            let native = Client::connect(&b.ws_url(), ClientOptions::default())
                .await
                .unwrap();
            let mut from_mqtt = native.subscribe("mixed/#").await.unwrap();
            let blob: Vec<u8> = (0..=255).collect();
            native
                .publish_confirmed("mixed/a", blob.clone())
                .await
                .unwrap();
            let got = m.recv().await.unwrap();
            assert_eq!(
                (got.topic.as_str(), &got.payload[..]),
                ("mixed/a", &blob[..])
            );
            assert_eq!(got.qos, 0, "a native publish is QoS 0");
            let echo = from_mqtt
                .recv_timeout(Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(echo.topic, "mixed/a", "the native subscriber's own copy");
            m.publish("mixed/b", Bytes::from(blob.clone()), 1, false)
                .await
                .unwrap();
            let n = from_mqtt
                .recv_timeout(Duration::from_secs(5))
                .await
                .unwrap();
            assert_eq!(n.topic, "mixed/b");
            assert!(n.payload == blob, "byte for byte");
            // The MQTT client sees its own publish too (it matches mixed/+).
            let own = m.recv().await.unwrap();
            assert_eq!((own.qos, &own.payload[..]), (1, &blob[..]));
            m.disconnect().await.unwrap();
        });
    }

    #[test]
    fn protocol_violations_close_only_that_connection() {
        let b = TestBroker::start(|c| {
            c.auth.users.push(wharf::config::auth::UserConfig {
                name: "sensor".into(),
                password_hash: wharf::auth::hash_password(b"s3cret").unwrap(),
                allow: wharf::config::auth::Permissions::everything(),
            });
        });
        block_on(async {
            let good = MqttOptions {
                credentials: Some(("sensor".into(), "s3cret".into())),
                ..opts("good")
            };
            let mut ok = MqttClient::connect(&url(&b), good.clone()).await.unwrap();
            // Wrong password: CONNACK 4.
            let bad = MqttOptions {
                credentials: Some(("sensor".into(), "nope".into())),
                ..opts("bad")
            };
            match MqttClient::connect(&url(&b), bad).await {
                Err(e) => assert!(e.to_string().contains("code 4"), "{e}"),
                Ok(_) => panic!("a bad password was accepted"),
            }
            // A malformed packet: that connection is closed with 1002.
            let mut victim = MqttClient::connect(
                &url(&b),
                MqttOptions {
                    client_id: "victim".into(),
                    ..good.clone()
                },
            )
            .await
            .unwrap();
            victim
                .send_raw(Bytes::from_static(&[0xf0, 0x00]))
                .await
                .unwrap();
            assert_eq!(victim.closed().await, Some(1002));
            // The healthy connection is untouched.
            ok.ping().await.unwrap();
            assert_eq!(ok.subscribe("still/here", 0).await.unwrap(), 0);
            ok.disconnect().await.unwrap();
        });
    }

    #[test]
    fn an_unknown_level_gets_connack_1_and_a_second_connect_a_close() {
        use wharf::protocol::mqtt::{self, Packet};
        let b = TestBroker::start(|_| {});
        let (status, _) = common::http(b.addr, "GET", "/mqtt", "");
        assert_eq!(status, 426, "not an upgrade");
        block_on(async {
            let v6 = MqttOptions {
                level: 6,
                ..opts("v6")
            };
            match MqttClient::connect(&url(&b), v6).await {
                Err(e) => assert!(e.to_string().contains("code 1"), "{e}"),
                Ok(_) => panic!("level 6 was accepted"),
            }
            // A second CONNECT is a protocol violation: closed with 1002.
            let mut raw = MqttClient::connect(&url(&b), opts("y")).await.unwrap();
            let mut buf = bytes::BytesMut::new();
            mqtt::encode(
                &Packet::Connect(Box::new(mqtt::Connect {
                    level: 4,
                    client_id: "y".into(),
                    clean_session: true,
                    keep_alive: 10,
                    will: None,
                    username: None,
                    password: None,
                    props: Default::default(),
                })),
                &mut buf,
                mqtt::LEVEL_3_1_1,
            );
            raw.send_raw(buf.freeze()).await.unwrap();
            assert_eq!(raw.closed().await, Some(1002));
        });
    }

    #[test]
    fn a_silent_client_is_closed_after_one_and_a_half_keep_alives() {
        let b = TestBroker::start(|c| {
            c.session.ping_interval_s = 1;
            c.session.idle_timeout_s = 60;
        });
        block_on(async {
            let silent = MqttOptions {
                keep_alive: 1,
                ..opts("silent")
            };
            let mut c = MqttClient::connect(&url(&b), silent).await.unwrap();
            let t0 = std::time::Instant::now();
            // WebSocket pongs alone do not count as MQTT activity.
            assert_eq!(c.closed().await, Some(1001));
            let took = t0.elapsed();
            assert!(
                took >= Duration::from_millis(1400) && took < Duration::from_secs(6),
                "{took:?}"
            );
        });
    }
}
