//! [`MqttSession`] without sockets: MQTT packets are encoded and fed to
//! [`MqttSession::data`], and what the session queued on its [`Outbound`]
//! is read back and decoded.

use super::*;
use crate::config::TopicsConfig;
use crate::protocol::codec::Format;
use crate::taskq::Scheduler;
use bytes::Bytes;

/// An MQTT session over the session tests' in-memory parts.
fn session() -> (Scheduler, MqttSession) {
    let (scheduler, broker, out, config) = crate::session::tests::parts(Format::Bincode);
    let session = MqttSession::new(broker, Sessions::new(), out, config);
    (scheduler, session)
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    actix_rt::System::new().block_on(f)
}

/// Feeds one packet to the session, encoded as a client sends it.
async fn send(session: &mut MqttSession, packet: &Packet) -> Result<(), MqttClose> {
    let mut buf = BytesMut::new();
    mqtt::encode(packet, &mut buf, mqtt::LEVEL_3_1_1);
    session
        .data(buf.clone().freeze(), std::time::Instant::now())
        .await
}

/// The packets the session has queued since the last call, decoded.
fn sent(session: &MqttSession) -> Vec<Packet> {
    let mut packets = Vec::new();
    for frame in session.outbound().take_queued() {
        let mut buf = BytesMut::from(&frame[..]);
        while !buf.is_empty() {
            match mqtt::decode(&mut buf, usize::MAX, mqtt::LEVEL_3_1_1) {
                Ok(Some(p)) => packets.push(p),
                other => panic!("an incomplete or invalid packet queued: {other:?}"),
            }
        }
    }
    packets
}

fn connect(client_id: &str) -> Packet {
    Packet::Connect(Box::new(Connect {
        level: 4,
        client_id: client_id.into(),
        clean_session: true,
        keep_alive: 30,
        will: None,
        username: None,
        password: None,
        props: Default::default(),
    }))
}

fn publish(topic: &str, qos: u8, pid: Option<u16>, payload: &'static [u8]) -> Packet {
    Packet::Publish(mqtt::PublishPacket {
        dup: false,
        qos,
        retain: false,
        topic: topic.into(),
        pid,
        payload: Bytes::from_static(payload),
        props: Default::default(),
    })
}

/// Connects `s` and checks the CONNACK.
async fn connected(s: &mut MqttSession) {
    send(s, &connect("c1")).await.expect("CONNECT accepted");
    assert_eq!(sent(s), [Packet::connack(false, connack::ACCEPTED)]);
}

#[test]
fn connect_is_answered_with_connack_accepted() {
    let (_scheduler, mut s) = session();
    run(connected(&mut s));
}

#[test]
fn subscribe_grants_the_qos_and_refuses_a_filter_past_max_levels() {
    let (_scheduler, mut s) = session();
    let levels = TopicsConfig::default().max_levels;
    let at_limit = vec!["x"; levels].join("/");
    let too_deep = vec!["x"; levels + 1].join("/");
    run(async {
        connected(&mut s).await;
        let filters = vec![("a/+".to_owned(), 1), (at_limit, 2), (too_deep, 1)];
        send(&mut s, &Packet::subscribe(7, filters))
            .await
            .expect("SUBSCRIBE handled");
        assert_eq!(
            sent(&s),
            [Packet::suback(7, vec![1, 2, mqtt::SUBACK_FAILURE])]
        );
    });
}

#[test]
fn a_qos1_publish_is_acknowledged_and_reaches_the_own_subscription() {
    let (_scheduler, mut s) = session();
    run(async {
        connected(&mut s).await;
        send(&mut s, &Packet::subscribe(1, vec![("a/+".to_owned(), 1)]))
            .await
            .expect("SUBSCRIBE handled");
        assert_eq!(sent(&s), [Packet::suback(1, vec![1])]);
        send(&mut s, &publish("a/b", 1, Some(9), b"hi"))
            .await
            .expect("PUBLISH handled");
        let packets = sent(&s);
        assert_eq!(packets.len(), 2, "{packets:?}");
        // The delivery takes a packet id of the session's own.
        let Packet::Publish(delivered) = &packets[0] else {
            panic!("expected the delivery first, got {packets:?}");
        };
        assert_eq!(
            (
                delivered.topic.as_str(),
                &delivered.payload[..],
                delivered.qos
            ),
            ("a/b", &b"hi"[..], 1)
        );
        let pid = delivered.pid.expect("a QoS 1 delivery has a packet id");
        assert_eq!(packets[1], Packet::puback(9));
        // Acknowledging it frees the packet id.
        send(&mut s, &Packet::puback(pid))
            .await
            .expect("PUBACK handled");
        assert!(s.sink.state.lock().pending.is_empty());
        assert_eq!(sent(&s), []);
    });
}

#[test]
fn a_publish_before_connect_closes_the_connection() {
    let (_scheduler, mut s) = session();
    run(async {
        let close = send(&mut s, &publish("a/b", 0, None, b"early"))
            .await
            .expect_err("PUBLISH before CONNECT refused");
        assert_eq!(close.code, 1002);
        assert!(close.reason.contains("CONNECT"), "{close:?}");
        assert_eq!(sent(&s), []);
    });
}

#[test]
fn an_mqtt5_connect_is_served_and_an_unknown_level_gets_connack_1() {
    let (_scheduler, mut s) = session();
    run(async {
        let mut c = match connect("v5") {
            Packet::Connect(c) => c,
            _ => unreachable!(),
        };
        c.level = mqtt::LEVEL_5;
        c.props.session_expiry_interval = Some(60);
        c.props.user_properties = vec![("k".into(), "v".into())];
        let mut buf = BytesMut::new();
        mqtt::encode(&Packet::Connect(c.clone()), &mut buf, mqtt::LEVEL_5);
        s.data(buf.clone().freeze(), std::time::Instant::now())
            .await
            .expect("MQTT 5 served");
        assert_eq!(s.sink.level(), mqtt::LEVEL_5);
        let frames: Vec<_> = s.outbound().take_queued();
        let mut bytes: BytesMut = frames.iter().flat_map(|f| f.iter().copied()).collect();
        match mqtt::decode(&mut bytes, 1 << 20, mqtt::LEVEL_5) {
            Ok(Some(Packet::ConnAck(a))) => {
                assert_eq!(a.code, mqtt::reason::SUCCESS);
                assert_eq!(a.props.topic_alias_maximum, Some(TOPIC_ALIAS_MAX));
            }
            other => panic!("expected CONNACK, got {other:?}"),
        }
    });
    let (_scheduler, mut s) = session();
    run(async {
        // A level nobody speaks: the 3.1.1 refusal, and the close.
        let mut buf = BytesMut::new();
        mqtt::encode(&connect("v6"), &mut buf, mqtt::LEVEL_3_1_1);
        // The level byte sits after the protocol name "MQTT".
        let at = buf.iter().position(|&b| b == b'T').unwrap() + 2;
        buf[at] = 6;
        let close = s
            .data(buf.clone().freeze(), std::time::Instant::now())
            .await
            .expect_err("level 6 refused");
        assert_eq!(close.code, 1002);
        let frames: Vec<_> = s.outbound().take_queued();
        let bytes: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
        assert_eq!(bytes, [0x20, 2, 0, connack::BAD_PROTOCOL]);
    });
}

/// Every MQTT connection holds its sink in an `Arc`: at 88 B it is a
/// 112 B allocation (mimalloc's 112 B class takes blocks of up to 105 B,
/// measured; the `Arc` adds 16). With its in-flight map unboxed it was
/// 128 B, a 160 B allocation.
#[test]
fn an_mqtt_sink_fits_a_112_byte_allocation() {
    let size = std::mem::size_of::<sink::MqttSink>();
    assert!(size <= 88, "the MQTT sink is {size} B");
}

/// Packets cut anywhere across reads (one byte at a time, or a read that
/// ends one packet and starts the next) are handled as if they came
/// whole, and a session holds no buffer once nothing is left over.
#[test]
fn packets_cut_across_reads_are_handled_whole_and_leave_no_buffer() {
    let mut wire = BytesMut::new();
    for p in [
        connect("c1"),
        Packet::subscribe(1, vec![("a/+".to_owned(), 1)]),
        publish("a/b", 1, Some(9), b"hello, cut"),
    ] {
        mqtt::encode(&p, &mut wire, mqtt::LEVEL_3_1_1);
    }
    let wire = wire.freeze();
    let whole = {
        let (_scheduler, mut s) = session();
        run(s.data(wire.clone(), std::time::Instant::now())).expect("whole");
        sent(&s)
    };
    assert_eq!(
        whole.len(),
        4,
        "CONNACK, SUBACK, the delivery, PUBACK: {whole:?}"
    );
    for step in [1, 2, 3, 5, 7, 11, 16] {
        let (_scheduler, mut s) = session();
        run(async {
            for chunk in wire.chunks(step) {
                s.data(Bytes::copy_from_slice(chunk), std::time::Instant::now())
                    .await
                    .expect("a cut packet is no violation");
            }
        });
        assert_eq!(sent(&s), whole, "in reads of {step} bytes");
        assert!(s.partial.is_none(), "a buffer kept after reads of {step}");
    }
    // A read that leaves part of a packet keeps just that part.
    let mut last = BytesMut::new();
    mqtt::encode(
        &publish("a/b", 1, Some(9), b"hello, cut"),
        &mut last,
        mqtt::LEVEL_3_1_1,
    );
    let (_scheduler, mut s) = session();
    run(s.data(wire.slice(..wire.len() - 3), std::time::Instant::now())).expect("part");
    assert_eq!(s.partial.as_ref().map(|p| p.len()), Some(last.len() - 3));
}
