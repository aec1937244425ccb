//! MQTT over plain TCP and over TLS: the same sessions as MQTT over
//! WebSocket, driven by a raw client built on the crate's own codec, by
//! Eclipse Paho (transport "tcp") and by mosquitto_pub / mosquitto_sub
//! (Debian's mosquitto-clients, installed by .ci/run).

use crate::common;

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::raw_mqtt::{self, Raw, T};
use common::{TestBroker, block_on};
use wharf::client::mqtt::{MqttClient, MqttOptions};
use wharf::protocol::mqtt::{self, Connect, Packet, PublishPacket, Will};

fn hello(id: &str) -> Connect {
    raw_mqtt::hello_at(4, id)
}

fn publish(topic: &str, payload: &'static [u8], qos: u8, pid: Option<u16>) -> Packet {
    Packet::Publish(PublishPacket {
        dup: false,
        qos,
        retain: false,
        topic: topic.into(),
        pid,
        payload: Bytes::from_static(payload),
        props: Default::default(),
    })
}

#[test]
fn tcp_and_websocket_clients_share_topics() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (mut sub, code) = Raw::connect(addr, hello("tcp-sub"));
    assert_eq!(code, 0);
    sub.send(&Packet::subscribe(1, vec![("tcp/+".into(), 1)]));
    assert_eq!(sub.recv(), Some(Packet::suback(1, vec![1])));
    // A WebSocket MQTT client publishes; the TCP subscriber gets it.
    block_on(async {
        let url = format!("ws://{}/mqtt", b.addr);
        let mut ws = MqttClient::connect(
            &url,
            MqttOptions {
                client_id: "ws-pub".into(),
                ..MqttOptions::default()
            },
        )
        .await
        .unwrap();
        ws.publish("tcp/a", Bytes::from_static(b"from ws"), 1, false)
            .await
            .unwrap();
        ws.disconnect().await.unwrap();
    });
    match sub.recv() {
        Some(Packet::Publish(p)) => {
            assert_eq!(
                (p.topic.as_str(), &p.payload[..], p.qos),
                ("tcp/a", &b"from ws"[..], 1)
            );
            sub.send(&Packet::puback(p.pid.unwrap()));
        }
        other => panic!("expected the publish, got {other:?}"),
    }
    // A TCP publisher, its packet split into single bytes across writes.
    let (mut publ, _) = Raw::connect(addr, hello("tcp-pub"));
    let mut bytes = BytesMut::new();
    mqtt::encode(
        &publish("tcp/b", b"split", 1, Some(7)),
        &mut bytes,
        mqtt::LEVEL_3_1_1,
    );
    for byte in bytes.iter() {
        publ.stream.write_all(&[*byte]).unwrap();
    }
    assert_eq!(publ.recv(), Some(Packet::puback(7)));
    match sub.recv() {
        Some(Packet::Publish(p)) => assert_eq!(&p.payload[..], b"split"),
        other => panic!("expected the split publish, got {other:?}"),
    }
    publ.send(&Packet::PingReq);
    assert_eq!(publ.recv(), Some(Packet::PingResp));
    publ.send(&Packet::disconnect());
    assert_eq!(publ.recv(), None, "closed after DISCONNECT");
}

#[test]
fn keep_alive_closes_a_silent_client_and_publishes_its_will() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (mut watcher, _) = Raw::connect(addr, hello("watcher"));
    watcher.send(&Packet::subscribe(1, vec![("wills/#".into(), 0)]));
    assert!(matches!(watcher.recv(), Some(Packet::SubAck(_))));
    let silent = Connect {
        keep_alive: 1,
        will: Some(Will {
            topic: "wills/silent".into(),
            payload: Bytes::from_static(b"gone"),
            qos: 0,
            retain: false,
            props: Default::default(),
        }),
        ..hello("silent")
    };
    let started = Instant::now();
    let (mut quiet, _) = Raw::connect(addr, silent);
    assert_eq!(quiet.recv(), None, "closed for silence");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1400) && waited < Duration::from_secs(4),
        "closed after {waited:?}, keep-alive 1 s"
    );
    match watcher.recv() {
        Some(Packet::Publish(p)) => assert_eq!(p.topic, "wills/silent"),
        other => panic!("expected the will, got {other:?}"),
    }
}

/// A new client, `loud`, publishes `wake` at QoS 1 to `quiet/t`, which
/// `quiet` reads and must get (and acknowledges); `loud` is returned.
fn wake(addr: std::net::SocketAddr, quiet: &mut Raw) -> Raw {
    let (mut loud, _) = Raw::connect(addr, hello("loud"));
    loud.send(&publish("quiet/t", b"wake", 1, Some(1)));
    assert_eq!(loud.recv(), Some(Packet::puback(1)));
    match quiet.recv() {
        Some(Packet::Publish(p)) => {
            assert_eq!(&p.payload[..], b"wake");
            quiet.send(&Packet::puback(p.pid.unwrap()));
        }
        other => panic!("expected the delivery, got {other:?}"),
    }
    loud
}

/// A new MQTT 5 client takes `quiet`'s session over: `quiet` must get
/// DISCONNECT 0x8E and be closed; the new client is returned.
fn take_over(addr: std::net::SocketAddr, quiet: &mut Raw) -> Raw {
    let (again, code) = Raw::connect(addr, raw_mqtt::hello_at(5, "quiet"));
    assert_eq!(code, 0);
    match quiet.recv() {
        Some(Packet::Disconnect(d)) => assert_eq!(d.reason, 0x8E, "session taken over"),
        other => panic!("expected DISCONNECT, got {other:?}"),
    }
    assert_eq!(quiet.recv(), None, "closed after DISCONNECT");
    again
}

/// A connection quiet for a second retires its writer task (an idle
/// connection holds none), and whatever is queued for it afterwards (a
/// delivery, a PINGRESP, the DISCONNECT of a takeover) starts one again.
#[test]
fn a_quiet_connection_s_writer_retires_and_comes_back_for_what_it_is_sent() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let writers = || common::metric(&b, "wharf_connection_writers");
    let all_retired = || common::wait_until(Duration::from_secs(10), || writers() == 0.0);
    let (mut quiet, _) = Raw::connect(addr, raw_mqtt::hello_at(5, "quiet"));
    quiet.send(&Packet::subscribe(1, vec![("quiet/t".into(), 1)]));
    assert!(matches!(quiet.recv(), Some(Packet::SubAck(_))));
    assert!(writers() >= 1.0, "a connection just served has its writer");
    assert!(all_retired(), "{} writers still run", writers());
    // A delivery.
    let _loud = wake(addr, &mut quiet);
    // An answer of its own.
    assert!(all_retired(), "{} writers still run", writers());
    quiet.send(&Packet::PingReq);
    assert_eq!(quiet.recv(), Some(Packet::PingResp));
    // The loop's timer comes while no writer runs (a client that only
    // publishes at QoS 0 is answered nothing, and its reads move its
    // keep-alive deadline on): the connection can still be written to.
    let (mut talker, _) = Raw::connect(
        addr,
        Connect {
            keep_alive: 2,
            ..raw_mqtt::hello_at(5, "talker")
        },
    );
    assert!(all_retired(), "{} writers still run", writers());
    // Past the first deadline (3 s after the CONNECT): the client's own
    // cadence, not a wait for an effect.
    for _ in 0..8 {
        talker.send(&publish("elsewhere", b"tick", 0, None));
        std::thread::sleep(Duration::from_millis(500));
    }
    talker.send(&Packet::PingReq);
    assert_eq!(talker.recv(), Some(Packet::PingResp));
    // A close asked for by another connection: the session taken over.
    assert!(all_retired(), "{} writers still run", writers());
    let _again = take_over(addr, &mut quiet);
}

/// A connection quiet for `[mqtt] park_after_ms` is parked (out of any
/// task), and each way back brings it back: a delivery, its own packet,
/// its keep-alive deadline (closed for silence, its will published to a
/// parked watcher) and a takeover. A parked connection still counts
/// against `max_connections`, and the broker's stop closes it.
#[test]
fn a_parked_connection_comes_back_for_each_way_it_is_wanted() {
    let b = TestBroker::start_tcp(|c| {
        c.mqtt.park_after_ms = 100;
        c.server.max_connections = 3;
    });
    let addr = b.mqtt_addr.unwrap();
    let parked = || common::metric(&b, "wharf_connections_parked");
    let parked_are = |n: f64| common::wait_until(Duration::from_secs(10), || parked() == n);
    let (mut quiet, _) = Raw::connect(addr, raw_mqtt::hello_at(5, "quiet"));
    quiet.send(&Packet::subscribe(1, vec![("quiet/#".into(), 1)]));
    assert!(matches!(quiet.recv(), Some(Packet::SubAck(_))));
    assert!(parked_are(1.0), "{} parked", parked());
    // A delivery.
    let mut loud = wake(addr, &mut quiet);
    // Its own packet.
    assert!(parked_are(2.0), "{} parked", parked());
    quiet.send(&Packet::PingReq);
    assert_eq!(quiet.recv(), Some(Packet::PingResp));
    // Its keep-alive deadline: a silent client with a will on a topic the
    // (parked) quiet one reads.
    assert!(parked_are(2.0), "{} parked", parked());
    let silent = Connect {
        keep_alive: 1,
        will: Some(Will {
            topic: "quiet/will".into(),
            payload: Bytes::from_static(b"gone"),
            qos: 0,
            retain: false,
            props: Default::default(),
        }),
        ..hello("silent")
    };
    let (mut silent, _) = Raw::connect(addr, silent);
    assert!(parked_are(3.0), "{} parked", parked());
    // Parked connections are counted: a fourth is refused.
    let mut refused = Raw::open(addr);
    refused.send(&Packet::Connect(Box::new(hello("fourth"))));
    assert_eq!(refused.recv(), None, "closed without a CONNACK");
    assert_eq!(silent.recv(), None, "closed for silence");
    match quiet.recv() {
        Some(Packet::Publish(p)) => assert_eq!(p.topic, "quiet/will"),
        other => panic!("expected the will, got {other:?}"),
    }
    // A takeover.
    assert!(parked_are(2.0), "{} parked", parked());
    let again = take_over(addr, &mut quiet);
    // The stop: both parked connections are closed and the stop ends.
    assert!(parked_are(2.0), "{} parked", parked());
    let started = Instant::now();
    b.stop().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the stop took {:?}",
        started.elapsed()
    );
    let mut again = again;
    match again.recv() {
        Some(Packet::Disconnect(d)) => assert_eq!(d.reason, 0x8B, "server shutting down"),
        other => panic!("expected DISCONNECT, got {other:?}"),
    }
    assert_eq!(loud.recv(), None, "closed by the stop");
}

/// MQTT connections run in tasks of their own, counted by the server:
/// past `[server] max_connections` one is closed at once, the ones open
/// are served, and once one closes there is room again.
#[test]
fn mqtt_connections_are_held_to_max_connections() {
    let b = TestBroker::start_tcp(|c| c.server.max_connections = 2);
    let addr = b.mqtt_addr.unwrap();
    let (mut first, code) = Raw::connect(addr, hello("first"));
    assert_eq!(code, 0);
    let (mut second, code) = Raw::connect(addr, hello("second"));
    assert_eq!(code, 0);
    let mut refused = Raw::open(addr);
    refused.send(&Packet::Connect(Box::new(hello("third"))));
    assert_eq!(refused.recv(), None, "closed without a CONNACK");
    second.send(&Packet::PingReq);
    assert_eq!(second.recv(), Some(Packet::PingResp));
    first.send(&Packet::disconnect());
    assert_eq!(first.recv(), None);
    assert!(
        common::wait_until(Duration::from_secs(10), || {
            let mut again = Raw::open(addr);
            again.send(&Packet::Connect(Box::new(hello("again"))));
            matches!(again.recv(), Some(Packet::ConnAck(_)))
        }),
        "room again once a connection closed"
    );
}

#[test]
fn a_protocol_violation_closes_only_that_connection() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let (mut good, _) = Raw::connect(addr, hello("good"));
    let (mut bad, _) = Raw::connect(addr, hello("bad"));
    bad.stream.write_all(&[0xf0, 0x00]).unwrap();
    assert_eq!(bad.recv(), None);
    // Something that is not MQTT at all.
    let mut junk = Raw::open(addr);
    junk.stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(junk.recv(), None);
    good.send(&Packet::PingReq);
    assert_eq!(good.recv(), Some(Packet::PingResp));
}

/// A broker with MQTT over TCP and one user, `sensor` (password
/// `s3cret`), who may publish and subscribe only under `sensors/sensor/`.
fn sensor_broker() -> TestBroker {
    use wharf::config::auth::{Permissions, UserConfig};
    TestBroker::start_tcp(|c| {
        c.auth.users.push(UserConfig {
            name: "sensor".into(),
            password_hash: wharf::auth::hash_password(b"s3cret").unwrap(),
            allow: Permissions {
                publish: vec!["sensors/%u/#".into()],
                subscribe: vec!["sensors/%u/#".into()],
                ..Permissions::default()
            },
        });
    })
}

#[test]
fn credentials_and_permissions_over_tcp() {
    let b = sensor_broker();
    let addr = b.mqtt_addr.unwrap();
    let login = |pw: &'static [u8]| Connect {
        username: Some("sensor".into()),
        password: Some(Bytes::from_static(pw)),
        ..hello("s1")
    };
    assert_eq!(Raw::connect(addr, login(b"nope")).1, 4);
    assert_eq!(Raw::connect(addr, hello("nobody")).1, 5);
    let (mut s, code) = Raw::connect(addr, login(b"s3cret"));
    assert_eq!(code, 0);
    s.send(&Packet::subscribe(
        2,
        vec![("sensors/sensor/#".into(), 0), ("sensors/#".into(), 0)],
    ));
    assert_eq!(s.recv(), Some(Packet::suback(2, vec![0, 0x80])));
    // A forbidden publish is acknowledged and dropped; the allowed one
    // after it arrives.
    s.send(&publish("elsewhere", b"no", 1, Some(3)));
    assert_eq!(s.recv(), Some(Packet::puback(3)));
    s.send(&publish("sensors/sensor/t", b"yes", 0, None));
    match s.recv() {
        Some(Packet::Publish(p)) => assert_eq!(&p.payload[..], b"yes"),
        other => panic!("expected the allowed publish, got {other:?}"),
    }
}

#[test]
fn mqtt_over_tls_with_the_test_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = common::make_certs(dir.path());
    let b = TestBroker::start_tcp(|c| {
        c.server.tls.cert = cert;
        c.server.tls.key = key;
    });
    let addr = b.mqtt_tls_addr.expect("a TLS listener");
    let trust = wharf::tls::client_config(&ca).unwrap();
    block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(trust)
            .connect(name, tcp)
            .await
            .expect("TLS handshake");
        let mut out = BytesMut::new();
        mqtt::encode(
            &Packet::Connect(Box::new(hello("tls-1"))),
            &mut out,
            mqtt::LEVEL_3_1_1,
        );
        mqtt::encode(
            &Packet::subscribe(1, vec![("tls/x".into(), 0)]),
            &mut out,
            mqtt::LEVEL_3_1_1,
        );
        mqtt::encode(
            &publish("tls/x", b"secret", 0, None),
            &mut out,
            mqtt::LEVEL_3_1_1,
        );
        tls.write_all(&out).await.unwrap();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        while got.len() < 3 {
            if let Some(p) = mqtt::decode(&mut buf, 1 << 20, mqtt::LEVEL_3_1_1).unwrap() {
                got.push(p);
                continue;
            }
            let n = actix_rt::time::timeout(T, tls.read_buf(&mut buf))
                .await
                .expect("packets within the timeout")
                .unwrap();
            assert!(n > 0, "closed early after {got:?}");
        }
        assert!(
            matches!(&got[0], Packet::ConnAck(a) if a.code == 0),
            "{got:?}"
        );
        assert_eq!(got[1], Packet::suback(1, vec![0]));
        assert!(matches!(&got[2], Packet::Publish(p) if &p.payload[..] == b"secret"));
    });
    // Plain MQTT to the TLS port is not served.
    let mut plain = Raw::open(addr);
    let mut out = BytesMut::new();
    mqtt::encode(
        &Packet::Connect(Box::new(hello("plain"))),
        &mut out,
        mqtt::LEVEL_3_1_1,
    );
    plain.stream.write_all(&out).unwrap();
    assert_eq!(plain.recv(), None);
}

/// Eclipse Paho over TCP.
#[test]
fn paho_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    common::interop(
        &common::python(),
        "mqtt_paho.py",
        b.mqtt_addr.unwrap().port(),
        &["tcp"],
    );
}

/// mosquitto_sub receives what mosquitto_pub sends, QoS 0 and 1,
/// retained included.
#[test]
fn mosquitto_clients_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    let port = b.mqtt_addr.unwrap().port().to_string();
    let publish = |args: &[&str]| {
        let out = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &port])
            .args(args)
            .output()
            .expect("mosquitto_pub runs (.ci/run installs mosquitto-clients)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    publish(&["-t", "mosq/retained", "-m", "kept", "-r", "-q", "1"]);
    // -C 2: exit after two messages; -W: give up after 10 s.
    let sub = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port, "-t", "mosq/#", "-q", "1"])
        .args(["-C", "2", "-W", "10", "-v"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("mosquitto_sub runs");
    // The retained message arrives on subscribe; the live one only once
    // the subscription exists, which nothing outside the client shows:
    // publish until the subscriber has its two messages and exits.
    let mut sub = sub;
    let mut exited = false;
    for _ in 0..20 {
        publish(&["-t", "mosq/live", "-m", "now", "-q", "1"]);
        if common::wait_until(Duration::from_millis(500), || {
            sub.try_wait().unwrap().is_some()
        }) {
            exited = true;
            break;
        }
    }
    assert!(exited, "mosquitto_sub did not get two messages");
    let out = sub.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.lines().collect::<Vec<_>>(),
        ["mosq/retained kept", "mosq/live now"]
    );
}

fn take_publishes(r: &mut Raw, n: usize, ack: bool) -> Vec<(Bytes, bool)> {
    r.take_publishes(n, ack)
}

/// `$share/{group}/{filter}`: messages spread over the group's members,
/// each to one; what a member leaves unacknowledged goes to another; an
/// ordinary subscriber of the filter still gets every message; leaving
/// and the last member's leaving end the membership and the group.
#[test]
fn shared_subscriptions_balance_and_redeliver() {
    let b = TestBroker::start_tcp(|_| {});
    let addr = b.mqtt_addr.unwrap();
    let join = |id: &str, filter: &str| {
        let (mut r, code) = Raw::connect(addr, hello(id));
        assert_eq!(code, 0);
        r.send(&Packet::subscribe(1, vec![(filter.to_owned(), 1)]));
        match r.recv() {
            Some(Packet::SubAck(a)) if a.pid == 1 => assert_eq!(a.codes, [1], "{filter}"),
            other => panic!("expected SUBACK, got {other:?}"),
        }
        r
    };
    let mut a = join("member-a", "$share/workers/jobs/+");
    let mut bee = join("member-b", "$share/workers/jobs/+");
    let mut everyone = join("watcher", "jobs/+");
    let (mut publisher, _) = Raw::connect(addr, hello("producer"));
    const PAYLOADS: [&[u8]; 20] = [
        b"0", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9", b"10", b"11", b"12", b"13",
        b"14", b"15", b"16", b"17", b"18", b"19",
    ];
    for (i, p) in PAYLOADS.iter().enumerate() {
        let pid = u16::try_from(i + 1).unwrap();
        publisher.send(&publish("jobs/x", p, 1, Some(pid)));
        assert_eq!(publisher.recv(), Some(Packet::puback(pid)));
    }
    // Round robin over two members with credit: ten each. A holds its
    // ten unacknowledged; B acks.
    let held = take_publishes(&mut a, 10, false);
    let acked = take_publishes(&mut bee, 10, true);
    let mut seen: Vec<Bytes> = held.iter().chain(&acked).map(|(p, _)| p.clone()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 20, "each message to one member");
    assert_eq!(take_publishes(&mut everyone, 20, true).len(), 20);

    // A goes away without acking: B gets A's ten, marked as redeliveries.
    drop(a);
    let again = take_publishes(&mut bee, 10, true);
    let mut want: Vec<&Bytes> = held.iter().map(|(p, _)| p).collect();
    let mut got: Vec<&Bytes> = again.iter().map(|(p, _)| p).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    assert!(again.iter().all(|(_, dup)| *dup), "redeliveries carry DUP");

    // B unsubscribes: the group ends, and so does its queue.
    bee.send(&Packet::unsubscribe(
        9,
        vec!["$share/workers/jobs/+".into()],
    ));
    assert_eq!(bee.recv(), Some(Packet::unsuback(9)));
    let (status, body) = common::http(b.addr, "GET", "/queues", "");
    assert_eq!(status, 200);
    assert!(
        !body.contains("$shared/"),
        "the group's queue is gone: {body}"
    );
    publisher.send(&publish("jobs/y", b"late", 1, Some(99)));
    assert_eq!(publisher.recv(), Some(Packet::puback(99)));
    assert_eq!(take_publishes(&mut everyone, 1, true)[0].0, "late");

    // A malformed share and one the principal may not hold are refused.
    let (mut c, _) = Raw::connect(addr, hello("bad-share"));
    c.send(&Packet::subscribe(
        2,
        vec![("$share/g".into(), 1), ("$share/a+b/t".into(), 1)],
    ));
    assert_eq!(
        c.recv(),
        Some(Packet::suback(2, vec![mqtt::SUBACK_FAILURE; 2]))
    );
}

/// mosquitto_sub members of one group split what mosquitto_pub sends.
#[test]
fn mosquitto_clients_share_a_subscription() {
    let b = TestBroker::start_tcp(|_| {});
    let port = b.mqtt_addr.unwrap().port().to_string();
    let member = |id: &str| {
        Command::new("mosquitto_sub")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-i",
                id,
                "-q",
                "1",
                "-W",
                "20",
            ])
            .args(["-t", "$share/g/split/#", "-v"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("mosquitto_sub runs (.ci/run installs mosquitto-clients)")
    };
    let members = [member("m1"), member("m2")];
    // Both members are in the group once its queue has two consumers.
    let joined = common::wait_until(T, || {
        let (_, body) = common::http(b.addr, "GET", "/queues", "");
        body.contains(r#""consumers":2"#)
    });
    assert!(joined, "both mosquitto_sub members joined");
    for i in 0..10 {
        let out = Command::new("mosquitto_pub")
            .args(["-h", "127.0.0.1", "-p", &port, "-q", "1"])
            .args(["-t", &format!("split/{i}"), "-m", &i.to_string()])
            .output()
            .expect("mosquitto_pub runs");
        assert!(out.status.success());
    }
    let counted = common::wait_until(T, || {
        let (_, body) = common::http(b.addr, "GET", "/queues", "");
        body.contains(r#""acked":10"#)
    });
    assert!(counted, "ten deliveries acknowledged by the members");
    let mut lines = Vec::new();
    for m in members {
        // SIGINT: mosquitto_sub exits cleanly, its output flushed.
        let pid = m.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let out = m.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let n = text.lines().count();
        assert!(n > 0, "each member got some: {text:?}");
        lines.extend(text.lines().map(str::to_owned));
    }
    lines.sort();
    lines.dedup();
    assert_eq!(lines.len(), 10, "each message once: {lines:?}");
}

/// Runs an MQTT 5 scenario of tests/interop/mqtt_paho.py with Eclipse
/// Paho over TCP; it must exit 0.
fn paho_v5_tcp(b: &TestBroker, scenario: &str) {
    let port = b.mqtt_addr.unwrap().port();
    common::interop(&common::python(), "mqtt_paho.py", port, &[scenario, "tcp"]);
}

/// MQTT 5 with Eclipse Paho over TCP: properties round trip between two
/// clients, PUBACK 0x10 and 0x99, CONNACK's properties, an assigned id.
#[test]
fn paho_v5_properties_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    paho_v5_tcp(&b, "v5_properties");
}

/// MQTT 5 session expiry with Paho over TCP.
#[test]
fn paho_v5_session_expiry_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    paho_v5_tcp(&b, "v5_session");
}

/// MQTT 5 subscription options and identifiers with Paho over TCP.
#[test]
fn paho_v5_subscription_options_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    paho_v5_tcp(&b, "v5_sub_options");
}

/// Session taken over (DISCONNECT 0x8E) with Paho over TCP.
#[test]
fn paho_v5_session_takeover_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    paho_v5_tcp(&b, "v5_takeover");
}

/// Will delay and DISCONNECT 0x04 with Paho over TCP.
#[test]
fn paho_v5_will_delay_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    paho_v5_tcp(&b, "v5_will");
}

/// MQTT 5 refusals with Paho over TCP: CONNACK 0x86, 0x87 and 0x8C
/// (enhanced authentication), SUBACK and PUBACK 0x87.
#[test]
fn paho_v5_refusals_over_tcp() {
    let b = sensor_broker();
    paho_v5_tcp(&b, "v5_refusals");
}

/// The client's receive maximum and maximum packet size with Paho over
/// TCP.
#[test]
fn paho_v5_receive_maximum_and_maximum_packet_size_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    paho_v5_tcp(&b, "v5_flow");
}

/// A silent Paho client gets DISCONNECT 0x8D over TCP.
#[test]
fn paho_v5_keep_alive_timeout_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    paho_v5_tcp(&b, "v5_keepalive");
}

/// A Paho client connected over TCP gets DISCONNECT 0x8B when the broker
/// stops.
#[test]
fn paho_v5_server_shutting_down_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    let port = b.mqtt_addr.unwrap().port();
    common::paho_through_shutdown(b, port, &["v5_shutdown", "tcp"]);
}

/// MQTT.js at protocol version 5 over TCP (mqtt://): user properties,
/// topic aliases both ways, subscription identifiers, message expiry.
#[test]
fn mqtt_js_v5_over_tcp() {
    let b = TestBroker::start_tcp(|_| {});
    let script = format!("{}/tests/interop/mqtt_js.mjs", env!("CARGO_MANIFEST_DIR"));
    let port = b.mqtt_addr.unwrap().port().to_string();
    let out = Command::new("node")
        .args([script.as_str(), port.as_str(), "v5", "tcp"])
        .output()
        .expect("node runs (scripts/test installs MQTT.js)");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs mosquitto_pub with `args` on port `port`; it must exit 0.
fn mosquitto_pub(port: &str, args: &[&str]) -> std::process::Output {
    let out = Command::new("mosquitto_pub")
        .args(["-h", "127.0.0.1", "-p", port])
        .args(args)
        .output()
        .expect("mosquitto_pub runs (.ci/run installs mosquitto-clients)");
    assert!(
        out.status.success(),
        "mosquitto_pub {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `mosquitto_pub -V mqttv5 -D publish ...`: the user properties, content
/// type, response topic, correlation data, payload format and message
/// expiry reach a native WebSocket subscriber as message headers.
#[test]
fn mosquitto_pub_v5_properties_become_native_headers() {
    use base64::Engine as _;
    let b = TestBroker::start_tcp(|_| {});
    let port = b.mqtt_addr.unwrap().port().to_string();
    block_on(async {
        let native = wharf::client::Client::connect(&b.ws_url(), Default::default())
            .await
            .unwrap();
        let mut sub = native.subscribe("mosq5/#").await.unwrap();
        let before = wharf_now_ms();
        mosquitto_pub(
            &port,
            &[
                "-V",
                "mqttv5",
                "-q",
                "1",
                "-t",
                "mosq5/orders/7",
                "-m",
                "placed",
                "-D",
                "publish",
                "user-property",
                "tenant",
                "acme",
                "-D",
                "publish",
                "user-property",
                "k",
                "v",
                "-D",
                "publish",
                "content-type",
                "application/json",
                "-D",
                "publish",
                "response-topic",
                "mosq5/replies/7",
                "-D",
                "publish",
                "correlation-data",
                "req-7",
                "-D",
                "publish",
                "payload-format-indicator",
                "1",
                "-D",
                "publish",
                "message-expiry-interval",
                "90",
            ],
        );
        let after = wharf_now_ms();
        let m = sub
            .recv_timeout(Duration::from_secs(10))
            .await
            .expect("the native subscriber gets mosquitto_pub's message");
        assert_eq!(
            (m.topic.as_str(), &m.payload[..]),
            ("mosq5/orders/7", &b"placed"[..])
        );
        let mut headers = m.headers.clone();
        let expires: u64 = headers
            .remove("expires-at")
            .expect("an expires-at header")
            .parse()
            .expect("expires-at in Unix ms");
        assert!(
            (before + 90_000..=after + 90_000).contains(&expires),
            "expires-at {expires}, published between {before} and {after} with 90 s"
        );
        let want: wharf::protocol::frame::Headers = [
            ("tenant", "acme"),
            ("k", "v"),
            ("content-type", "application/json"),
            ("response-topic", "mosq5/replies/7"),
            (
                "correlation-data",
                &*base64::engine::general_purpose::STANDARD.encode(b"req-7"),
            ),
            ("payload-format", "utf-8"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(headers, want);
        // Without -D, no headers at all.
        mosquitto_pub(
            &port,
            &["-V", "mqttv5", "-q", "1", "-t", "mosq5/plain", "-m", "p"],
        );
        let m = sub.recv_timeout(Duration::from_secs(10)).await.unwrap();
        assert_eq!(m.topic, "mosq5/plain");
        assert!(m.headers.is_empty(), "{:?}", m.headers);
    });
}

fn wharf_now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// `mosquitto_sub -V mqttv5 -F` prints, as MQTT 5 properties, the headers
/// of an HTTP publish and of a native WebSocket publish.
#[test]
fn mosquitto_sub_v5_prints_native_headers_as_properties() {
    use base64::Engine as _;
    let b = TestBroker::start_tcp(|_| {});
    let port = b.mqtt_addr.unwrap().port().to_string();
    // Topic, user properties, content type, response topic, correlation
    // data, message expiry, payload format, payload.
    let sub = Command::new("mosquitto_sub")
        .args(["-h", "127.0.0.1", "-p", &port, "-V", "mqttv5", "-q", "1"])
        .args(["-t", "mosq5/#", "-C", "2", "-W", "15"])
        .args(["-F", "%t|%P|%C|%R|%D|%E|%F|%p"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mosquitto_sub runs (.ci/run installs mosquitto-clients)");
    // Publish over HTTP until the publish is delivered to one subscriber:
    // mosquitto_sub's subscription exists then, and it has that message.
    let subscribed = common::wait_until(T, || {
        let (status, _, body) = common::http_request(
            b.addr,
            "POST",
            "/topics/mosq5/http",
            "x-wharf-tenant: globex\r\n",
            "over http",
        );
        // 202 while no one has it yet, 200 once delivered.
        assert!(matches!(status, 200 | 202), "{status} {body}");
        body.contains(r#""delivered":1"#)
    });
    assert!(subscribed, "mosquitto_sub subscribed");
    block_on(async {
        let native = wharf::client::Client::connect(&b.ws_url(), Default::default())
            .await
            .unwrap();
        let headers: wharf::protocol::frame::Headers = [
            ("tenant", "acme"),
            ("trace-id", "t-1"),
            ("content-type", "application/json"),
            ("response-topic", "mosq5/replies"),
            (
                "correlation-data",
                &*base64::engine::general_purpose::STANDARD.encode(b"corr-1"),
            ),
            ("payload-format", "utf-8"),
            ("expires-at", &(wharf_now_ms() + 60_000).to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        native
            .publish_with(
                "mosq5/native",
                b"{\"n\":1}".to_vec(),
                headers,
                false,
                Default::default(),
                true,
            )
            .await
            .unwrap();
    });
    let out = sub.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0], "mosq5/http|tenant:globex||||||over http");
    // What is left of 60 s, rounded up: 60, or 59 on a slow machine.
    let fields: Vec<&str> = lines[1].split('|').collect();
    assert!(matches!(fields[5], "59" | "60"), "{}", lines[1]);
    assert_eq!(
        [
            fields[0], fields[1], fields[2], fields[3], fields[4], fields[6], fields[7]
        ],
        [
            "mosq5/native",
            "tenant:acme trace-id:t-1",
            "application/json",
            "mosq5/replies",
            "corr-1",
            "1",
            "{\"n\":1}"
        ],
        "{}",
        lines[1]
    );
}
