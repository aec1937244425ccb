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
    mqtt::encode(packet, &mut buf);
    session.data(&buf).await
}

/// The packets the session has queued since the last call, decoded.
fn sent(session: &MqttSession) -> Vec<Packet> {
    let mut packets = Vec::new();
    for frame in session.outbound().take_queued() {
        let mut buf = BytesMut::from(&frame[..]);
        while !buf.is_empty() {
            match mqtt::decode(&mut buf, usize::MAX) {
                Ok(Some(p)) => packets.push(p),
                other => panic!("an incomplete or invalid packet queued: {other:?}"),
            }
        }
    }
    packets
}

fn connect(client_id: &str) -> Packet {
    Packet::Connect(Connect {
        level: 4,
        client_id: client_id.into(),
        clean_session: true,
        keep_alive: 30,
        will: None,
        username: None,
        password: None,
    })
}

fn publish(topic: &str, qos: u8, pid: Option<u16>, payload: &'static [u8]) -> Packet {
    Packet::Publish(mqtt::Publish {
        dup: false,
        qos,
        retain: false,
        topic: topic.into(),
        pid,
        payload: Bytes::from_static(payload),
    })
}

/// Connects `s` and checks the CONNACK.
async fn connected(s: &mut MqttSession) {
    send(s, &connect("c1")).await.expect("CONNECT accepted");
    assert_eq!(
        sent(s),
        [Packet::ConnAck {
            session_present: false,
            code: connack::ACCEPTED,
        }]
    );
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
        send(&mut s, &Packet::Subscribe(7, filters))
            .await
            .expect("SUBSCRIBE handled");
        assert_eq!(sent(&s), [Packet::SubAck(7, vec![1, 2, SUBACK_FAILURE])]);
    });
}

#[test]
fn a_qos1_publish_is_acknowledged_and_reaches_the_own_subscription() {
    let (_scheduler, mut s) = session();
    run(async {
        connected(&mut s).await;
        send(&mut s, &Packet::Subscribe(1, vec![("a/+".to_owned(), 1)]))
            .await
            .expect("SUBSCRIBE handled");
        assert_eq!(sent(&s), [Packet::SubAck(1, vec![1])]);
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
        assert_eq!(packets[1], Packet::PubAck(9));
        // Acknowledging it frees the packet id.
        send(&mut s, &Packet::PubAck(pid))
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
