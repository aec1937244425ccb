//! MQTT over WebSocket or TCP: 1 -> 1 and 1 -> N at QoS 0 and 1, with
//! Wharf's own MQTT client, so the same load can be pointed at another
//! broker's MQTT listener (`--mqtt-url ws://host:port/mqtt` or
//! `mqtt://host:port`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use wharf::client::mqtt::{MqttClient, MqttOptions};

use super::{Args, Cpu, Row};

/// How long a subscriber waits for a delivery before it counts the rest
/// as not delivered.
const QUIET: Duration = Duration::from_secs(3);

fn opts(args: &Args, id: String) -> MqttOptions {
    MqttOptions {
        client_id: id,
        timeout: Duration::from_secs(30),
        credentials: args.token.clone().map(|t| ("bench".to_owned(), t)),
        tls: super::trust(args),
        ..MqttOptions::default()
    }
}

/// Every MQTT scenario against `url`.
pub(crate) fn scenarios(args: &Args, url: &str) -> Vec<Row> {
    if args.one_to_one_only {
        return vec![run(args, url, 1, 0, args.mqtt_messages, WINDOW)];
    }
    vec![
        run(args, url, 1, 0, args.mqtt_messages, WINDOW),
        run(args, url, args.fanout, 0, args.mqtt_messages / 5, WINDOW),
        run(args, url, 1, 1, args.mqtt_messages / 2, WINDOW),
        run(args, url, args.fanout, 1, args.mqtt_messages / 20, WINDOW),
    ]
}

/// QoS 1 publishes a publisher keeps unacknowledged.
const WINDOW: usize = 256;

/// QoS 1 over WebSocket and TCP against a broker with the default
/// `[session]` (a rate of 100,000 frames/s per session, which subscribers'
/// PUBACKs once counted against) and a publisher window of 3,000: every
/// delivery must arrive, and no connection be closed; then a subscriber
/// slower than its publisher, which must lose nothing either.
pub(crate) fn default_rate(args: &Args) -> Vec<Row> {
    let dir = std::env::temp_dir().join(format!("wharf-bench-{}-rate", std::process::id()));
    let (s, url) = crate::spawn_broker_with(args, &dir, "[session]\noutbound_limit = 268435456\n");
    let mut a = args.clone();
    a.pid = Some(s.child.id());
    let ws = url.replace("/ws", "/mqtt");
    let tcp = format!("mqtt://{}", s.mqtt_tcp);
    let mut rows = Vec::new();
    for url in [ws.as_str(), tcp.as_str()] {
        for (subs, n) in [(1, args.mqtt_messages), (a.fanout, args.mqtt_messages / 10)] {
            let mut row = run(&a, url, subs, 1, n, 3000);
            row.scenario = format!("{}, default [session] rate, window 3,000", row.scenario);
            rows.push(row);
        }
    }
    // A subscriber slower than its publisher: it takes 100,000
    // deliveries/s; the publisher could send ten times that. Under the
    // default `[mqtt] slow_subscriber = "hold"` the publisher goes at the
    // subscriber's pace and nothing is lost.
    for url in [ws.as_str(), tcp.as_str()] {
        let mut row = run_paced(&a, url, 1, 1, args.mqtt_messages, 3000, Some(100_000));
        row.scenario = format!(
            "{}, a subscriber taking 100,000/s, default [mqtt], window 3,000",
            row.scenario
        );
        rows.push(row);
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    rows
}

/// One publisher (QoS 1: `window` publishes unacknowledged at most),
/// `subs` subscribers spread over client threads; returns deliveries per
/// second.
fn run(args: &Args, url: &str, subs: usize, qos: u8, n: usize, window: usize) -> Row {
    run_paced(args, url, subs, qos, n, window, None)
}

/// [`run`] with subscribers that take at most `pace` deliveries a second
/// each (`None`: as fast as they can).
fn run_paced(
    args: &Args,
    url: &str,
    subs: usize,
    qos: u8,
    n: usize,
    window: usize,
    pace: Option<u64>,
) -> Row {
    let topic = format!("bench/mqtt/{qos}/{subs}");
    let _bar = crate::progress::scenario(format!("MQTT QoS {qos}, 1 -> {subs}"));
    let threads = args.threads.clamp(1, subs);
    // Readiness by channel, with a timeout: a subscriber that cannot
    // connect must not leave the run waiting for ever.
    let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
    let received = Arc::new(AtomicUsize::new(0));
    let last_at = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let readers: Vec<_> = (0..threads)
        .map(|t| {
            let mine = subs / threads + usize::from(t < subs % threads);
            let (url, topic, ready) = (url.to_owned(), topic.clone(), ready_tx.clone());
            let (received, last_at) = (received.clone(), last_at.clone());
            let args = args.clone();
            std::thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let mut clients = Vec::with_capacity(mine);
                    for i in 0..mine {
                        let mut c =
                            MqttClient::connect(&url, opts(&args, format!("bench-s{t}-{i}-{qos}")))
                                .await
                                .expect("subscriber connects");
                        c.subscribe(&topic, qos).await.expect("subscribe");
                        clients.push(c);
                    }
                    let _ = ready.send(());
                    // Each client in turn: the socket buffers the rest. A
                    // delivery the broker dropped (QoS 0 under the
                    // slow-consumer policy, QoS 1 past the in-flight or
                    // outbound bound) never comes: a quiet spell ends the
                    // count rather than the run.
                    let reads = clients.into_iter().map(|mut c| {
                        let (received, last_at) = (received.clone(), last_at.clone());
                        async move {
                            let mut got = 0;
                            // The last delivery came a quiet spell before
                            // a timeout (within the timer's millisecond).
                            let mut quiet = Duration::ZERO;
                            let began = Instant::now();
                            while got < n {
                                match actix_rt::time::timeout(QUIET, c.recv()).await {
                                    Ok(Ok(_)) => {
                                        got += 1;
                                        // A slow subscriber: every 1,000
                                        // deliveries it waits until its pace
                                        // allows more.
                                        if let (Some(pace), 0) = (pace, got % 1000) {
                                            let due = began
                                                + Duration::from_secs_f64(got as f64 / pace as f64);
                                            actix_rt::time::sleep_until(due.into()).await;
                                        }
                                    }
                                    Ok(Err(e)) => {
                                        eprintln!("an MQTT subscriber stopped: {e}");
                                        break;
                                    }
                                    Err(_) => {
                                        quiet = QUIET;
                                        break;
                                    }
                                }
                            }
                            received.fetch_add(got, Ordering::Relaxed);
                            let at = start.elapsed().saturating_sub(quiet);
                            last_at.fetch_max(at.as_nanos() as u64, Ordering::Relaxed);
                        }
                    });
                    futures_util::future::join_all(reads).await;
                })
            })
        })
        .collect();
    for _ in 0..threads {
        ready
            .recv_timeout(Duration::from_secs(60))
            .expect("subscribers connected and subscribed within 60 s");
    }
    let cpu = Cpu::start(args.pid);
    let t0 = start.elapsed();
    let payload = Bytes::from(vec![0x5au8; args.size]);
    let url_p = url.to_owned();
    let topic_p = topic.clone();
    let args_p = args.clone();
    std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let mut p = MqttClient::connect(&url_p, opts(&args_p, format!("bench-p-{qos}-{subs}")))
                .await
                .expect("publisher connects");
            let batch: Vec<Bytes> = (0..window.max(256)).map(|_| payload.clone()).collect();
            let mut sent = 0;
            while sent < n {
                let k = batch.len().min(n - sent);
                if qos == 0 {
                    p.publish_batch(&topic_p, &batch[..k])
                        .await
                        .expect("publish");
                } else {
                    p.publish_qos1_pipelined(&topic_p, &batch[..k], window)
                        .await
                        .expect("publish");
                }
                sent += k;
            }
            p.ping().await.expect("ping");
        })
    })
    .join()
    .expect("publisher");
    for r in readers {
        r.join().expect("subscriber thread");
    }
    let (gen_cores, broker_cores) = cpu.cores();
    let elapsed = Duration::from_nanos(last_at.load(Ordering::Relaxed)).saturating_sub(t0);
    let got = received.load(Ordering::Relaxed);
    let lost = match n * subs - got {
        0 => String::new(),
        k => format!(", {k} not delivered"),
    };
    Row {
        scenario: format!(
            "MQTT/{} QoS {qos}, 1 -> {subs}, {} B, {n} msgs",
            if url.starts_with("mqtt://") {
                "TCP"
            } else {
                "WebSocket"
            },
            args.size
        ),
        result: format!(
            "{:.0} deliveries/s{lost}",
            got as f64 / elapsed.as_secs_f64().max(1e-9)
        ),
        gen_cores,
        broker_cores,
    }
}
