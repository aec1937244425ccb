//! The per-session rate over real sockets: a client's settlement of what
//! the broker delivered to it (MQTT PUBACK, native `ack`) is never
//! charged, so a fast subscriber or consumer is not cut off for keeping
//! up; an MQTT client past the rate is slowed (not read), not closed.

use crate::common::{self, TestBroker, block_on};

use std::time::{Duration, Instant};

use bytes::Bytes;
use wharf::client::mqtt::{MqttClient, MqttOptions};
use wharf::client::{Client, ClientOptions};

const WAIT: Duration = Duration::from_secs(20);

fn opts(id: &str) -> MqttOptions {
    MqttOptions {
        client_id: id.into(),
        timeout: WAIT,
        ..MqttOptions::default()
    }
}

fn payloads(n: usize) -> Vec<Bytes> {
    (0..n).map(|i| Bytes::from(format!("m{i}"))).collect()
}

/// A broker whose sessions may send `rate` frames a second, `burst` at
/// once, serving MQTT over WebSocket and TCP.
fn broker(rate: u32, burst: u32) -> TestBroker {
    TestBroker::start_tcp(|c| {
        c.session.rate_per_s = rate;
        c.session.rate_burst = burst;
    })
}

fn urls(b: &TestBroker) -> [String; 2] {
    [
        format!("ws://{}/mqtt", b.addr),
        format!("mqtt://{}", b.mqtt_addr.unwrap()),
    ]
}

/// Four publishers, each within its own burst, deliver 4,000 QoS 1
/// messages to one subscriber in well under a second: its 4,000 PUBACKs
/// are four times the rate, and it is neither slowed into losing nor
/// closed (before, its acknowledgements counted against its rate and it
/// was closed with "rate limit exceeded").
#[test]
fn a_qos1_subscriber_acknowledging_faster_than_the_rate_is_not_cut_off() {
    let b = broker(1000, 1000);
    for url in urls(&b) {
        block_on(async {
            let mut sub = MqttClient::connect(&url, opts("fast-sub")).await.unwrap();
            assert_eq!(sub.subscribe("rate/acks", 1).await.unwrap(), 1);
            let mut pubs = Vec::new();
            for i in 0..4 {
                pubs.push(
                    MqttClient::connect(&url, opts(&format!("pub-{i}")))
                        .await
                        .unwrap(),
                );
            }
            let publish = futures_util::future::join_all(pubs.iter_mut().map(|p| async {
                p.publish_qos1_pipelined("rate/acks", &payloads(1000), 100)
                    .await
                    .unwrap();
            }));
            let receive = async {
                let mut got = 0;
                while got < 4000 {
                    match actix_rt::time::timeout(WAIT, sub.recv()).await {
                        Ok(Ok(p)) => {
                            assert_eq!(p.qos, 1);
                            got += 1;
                        }
                        other => panic!("{url}: after {got} deliveries: {other:?}"),
                    }
                }
            };
            tokio::join!(publish, receive);
            sub.ping().await.unwrap();
        });
    }
}

/// An MQTT publisher past the rate is slowed to it, not closed: 2,000
/// QoS 1 publishes (one at a time) at 1,000/s with a burst of 500 take
/// about 1.5 s, and each is acknowledged and delivered.
#[test]
fn an_mqtt_publisher_past_the_rate_is_slowed_not_closed() {
    let b = broker(1000, 500);
    for url in urls(&b) {
        block_on(async {
            let mut sub = MqttClient::connect(&url, opts("slow-sub")).await.unwrap();
            assert_eq!(sub.subscribe("rate/pubs", 1).await.unwrap(), 1);
            let mut publisher = MqttClient::connect(&url, opts("eager")).await.unwrap();
            let started = Instant::now();
            // One publish at a time: each its own read over TCP too (where
            // the rate counts reads).
            let publish = async {
                for p in payloads(2000) {
                    publisher.publish("rate/pubs", p, 1, false).await.unwrap();
                }
                started.elapsed()
            };
            let receive = async {
                for got in 0..2000 {
                    match actix_rt::time::timeout(WAIT, sub.recv()).await {
                        Ok(Ok(_)) => {}
                        other => panic!("{url}: after {got} deliveries: {other:?}"),
                    }
                }
            };
            let (took, ()) = tokio::join!(publish, receive);
            // The rate held (1,500 past the burst at 1,000/s), with room
            // for the clocks' rounding.
            assert!(took >= Duration::from_millis(1300), "{url}: {took:?}");
            publisher.ping().await.unwrap();
        });
    }
}

/// A native consumer acknowledging 1,000 deliveries at five times its
/// frame rate gets every ack taken: none refused, the queue emptied,
/// the connection open.
#[test]
fn a_native_consumer_acknowledging_faster_than_the_rate_is_not_refused() {
    let b = broker(200, 200);
    for i in 0..1000 {
        let (status, body) =
            common::http(b.addr, "POST", "/queues/rate-q/messages", &format!("m{i}"));
        assert_eq!(status, 201, "{body}");
    }
    block_on(async {
        let options = ClientOptions {
            timeout: WAIT,
            ..ClientOptions::default()
        };
        let mut c = Client::connect(&b.ws_url(), options).await.unwrap();
        let mut consumer = c.consume("rate-q", 100).await.unwrap();
        for got in 0..1000 {
            let d = consumer
                .recv_timeout(WAIT)
                .await
                .unwrap_or_else(|| panic!("delivery {got} did not come"));
            c.ack_nowait(consumer.id(), &[d.id]).await.unwrap();
        }
        c.ping().await.unwrap();
        assert_eq!(
            c.next_error(Duration::ZERO).await,
            None,
            "an ack was refused"
        );
    });
    let emptied = common::wait_until(WAIT, || {
        let (_, body) = common::http(b.addr, "GET", "/queues/rate-q", "");
        body.contains("\"depth\":0") && body.contains("\"in_flight\":0")
    });
    assert!(
        emptied,
        "{}",
        common::http(b.addr, "GET", "/queues/rate-q", "").1
    );
}
