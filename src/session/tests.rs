//! [`Session::handle`] without sockets: frames go in as JSON text, and
//! what the session queued on its [`Outbound`] is read back and decoded.

use super::*;
use crate::config::TopicsConfig;
use crate::protocol::codec;
use crate::taskq::{Scheduler, SchedulerConfig};

/// What a session runs on without sockets or a store: a one-worker
/// scheduler (which must outlive the session's use), a broker on it, an
/// outbound queue in `format`, and the default session config. Shared by
/// the native and MQTT session tests.
pub(in crate::session) fn parts(
    format: Format,
) -> (Scheduler, Broker, std::sync::Arc<Outbound>, SessionConfig) {
    let scheduler = Scheduler::new(&SchedulerConfig {
        workers: 1,
        ..SchedulerConfig::default()
    })
    .expect("a scheduler");
    let broker = Broker::new(scheduler.handle());
    let config = SessionConfig::default();
    let out = Outbound::new(
        config.outbound_limit,
        config.slow_consumer,
        config.write_quantum,
        format,
    );
    (scheduler, broker, out, config)
}

/// A native session over [`parts`].
fn session() -> (Scheduler, Session) {
    let (scheduler, broker, out, config) = parts(Format::Json);
    let session = Session::new(broker, Sessions::new(), out, config);
    (scheduler, session)
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    actix_rt::System::new().block_on(f)
}

/// Handles one JSON frame.
async fn send(session: &mut Session, json: &str) -> Next {
    let frame = codec::decode_client(Format::Json, json.as_bytes()).expect("a valid frame");
    session.handle(Format::Json, frame).await
}

/// What the session has queued since the last call, decoded.
fn sent(session: &Session) -> Vec<ServerFrame> {
    session
        .outbound()
        .take_queued()
        .iter()
        .map(|bytes| codec::decode_server(Format::Json, bytes).expect("a server frame"))
        .collect()
}

/// The error the session sent, which must be its only frame.
fn only_error(session: &Session) -> ErrorFrame {
    match sent(session).as_slice() {
        [ServerFrame::Error(e)] => e.clone(),
        other => panic!("expected one error frame, got {other:?}"),
    }
}

#[test]
fn hello_subscribe_publish_reaches_the_own_subscription() {
    let (_scheduler, mut s) = session();
    run(async {
        send(&mut s, r#"{"op":"hello","client_id":"c1"}"#).await;
        match sent(&s).as_slice() {
            [ServerFrame::Welcome(w)] => {
                assert_eq!(w.client_id, "c1");
                assert_eq!(w.session, s.id().to_string());
            }
            other => panic!("expected welcome, got {other:?}"),
        }
        send(
            &mut s,
            r#"{"op":"subscribe","id":"s1","filter":"a/+","rid":1}"#,
        )
        .await;
        assert_eq!(sent(&s), [ServerFrame::Receipt(Receipt { rid: 1 })]);
        let next = send(
            &mut s,
            r#"{"op":"publish","topic":"a/b","payload":"hi","rid":2}"#,
        )
        .await;
        assert_eq!(next, Next::Continue);
        let frames = sent(&s);
        let message = frames.iter().find_map(|f| match f {
            ServerFrame::Message(m) => Some(m),
            _ => None,
        });
        let m = message.expect("the published message");
        assert_eq!((m.sub.as_str(), m.topic.as_str()), ("s1", "a/b"));
        assert_eq!(m.payload, b"hi");
        assert!(frames.contains(&ServerFrame::Receipt(Receipt { rid: 2 })));
        assert_eq!(frames.len(), 2, "{frames:?}");
    });
}

#[test]
fn a_duplicate_subscription_id_is_refused_with_the_rid() {
    let (_scheduler, mut s) = session();
    run(async {
        send(
            &mut s,
            r#"{"op":"subscribe","id":"s1","filter":"a","rid":1}"#,
        )
        .await;
        assert_eq!(sent(&s), [ServerFrame::Receipt(Receipt { rid: 1 })]);
        send(
            &mut s,
            r#"{"op":"subscribe","id":"s1","filter":"b","rid":2}"#,
        )
        .await;
        let e = only_error(&s);
        assert_eq!((e.code, e.rid), (ErrorCode::DuplicateSubscription, Some(2)));
    });
}

#[test]
fn unsubscribing_an_unknown_id_is_refused() {
    let (_scheduler, mut s) = session();
    run(async {
        send(&mut s, r#"{"op":"unsubscribe","id":"nope","rid":3}"#).await;
        let e = only_error(&s);
        assert_eq!((e.code, e.rid), (ErrorCode::UnknownSubscription, Some(3)));
    });
}

#[test]
fn a_publish_deeper_than_max_levels_is_an_invalid_topic() {
    let (_scheduler, mut s) = session();
    let levels = TopicsConfig::default().max_levels;
    let at_limit = vec!["x"; levels].join("/");
    let too_deep = vec!["x"; levels + 1].join("/");
    run(async {
        send(
            &mut s,
            &format!(r#"{{"op":"publish","topic":"{at_limit}","payload":"","rid":4}}"#),
        )
        .await;
        assert_eq!(sent(&s), [ServerFrame::Receipt(Receipt { rid: 4 })]);
        send(
            &mut s,
            &format!(r#"{{"op":"publish","topic":"{too_deep}","payload":"","rid":5}}"#),
        )
        .await;
        let e = only_error(&s);
        assert_eq!((e.code, e.rid), (ErrorCode::InvalidTopic, Some(5)));
    });
}

#[test]
fn a_second_hello_is_unexpected() {
    let (_scheduler, mut s) = session();
    run(async {
        send(&mut s, r#"{"op":"hello"}"#).await;
        assert!(matches!(sent(&s).as_slice(), [ServerFrame::Welcome(_)]));
        send(&mut s, r#"{"op":"hello"}"#).await;
        let e = only_error(&s);
        assert_eq!((e.code, e.rid), (ErrorCode::UnexpectedHello, None));
    });
}

#[test]
fn close_tells_the_connection_to_close() {
    let (_scheduler, mut s) = session();
    run(async {
        assert_eq!(
            send(&mut s, r#"{"op":"close","drain":true}"#).await,
            Next::Close { drain: true }
        );
        assert_eq!(
            send(&mut s, r#"{"op":"close"}"#).await,
            Next::Close { drain: false }
        );
        assert!(sent(&s).is_empty());
    });
}
