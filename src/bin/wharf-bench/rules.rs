//! The rules scenarios (`--rules-only`): native 1 -> 1 against brokers
//! with 0, 10 and 1,000 rules on other topics and with one matching
//! republish rule, in the same run; and a forward to a local HTTP
//! backend with 8 requests in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wharf::client::Client;

use crate::{Args, Cpu, Row, options, progress, spawn_broker_in, throughput_rate};

/// `n` rules on topics the benchmark does not publish to, each with a
/// header leaf as well (indexed by their topic).
fn other_rules(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "[[rules]]\nname = \"other-{i}\"\nwhen = {{ all = [ {{ topic = \"other/{i}/+/#\" }}, {{ header = \"kind\", equals = \"x\" }} ] }}\nthen = [ {{ republish = \"copies/{i}/{{1}}\" }} ]\n"
            )
        })
        .collect()
}

/// Every rules scenario.
pub(crate) fn scenarios(args: &Args) -> Vec<Row> {
    let matching = "[[rules]]\nname = \"copy\"\nwhen = { topic = \"bench/one\" }\nthen = [ { republish = \"bench/copy\" } ]\n";
    let cases = [
        ("0 rules", String::new()),
        ("10 rules on other topics", other_rules(10)),
        ("1,000 rules on other topics", other_rules(1000)),
        ("1 matching republish rule", matching.to_owned()),
    ];
    let mut rows = Vec::new();
    let mut base = None;
    for (i, (label, rules)) in cases.iter().enumerate() {
        let dir =
            std::env::temp_dir().join(format!("wharf-bench-{}-rules-{i}", std::process::id()));
        let (s, url) = spawn_broker_in(args, &dir, rules);
        let mut a = args.clone();
        a.pid = Some(s.child.id());
        let (mut row, rate) = throughput_rate(&a, &url, "bench/one", 1);
        let base_rate = *base.get_or_insert(rate);
        row.scenario = format!("1 -> 1, {label}");
        row.result = format!(
            "{} ({:.0}% of 0 rules)",
            row.result,
            100.0 * rate / base_rate.max(1e-9)
        );
        rows.push(row);
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
    rows.push(forward(args));
    rows
}

/// Messages forwarded per second to a local backend that answers 204,
/// with 8 lanes and 8 publishers.
fn forward(args: &Args) -> Row {
    let n = args.messages.min(50_000);
    let publishers = 8;
    let count = Arc::new(AtomicUsize::new(0));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let counted = count.clone();
    std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let counted = counted.clone();
            let server = actix_web::HttpServer::new(move || {
                let counted = counted.clone();
                actix_web::App::new().default_service(actix_web::web::to(
                    move |_body: actix_web::web::Bytes| {
                        counted.fetch_add(1, Ordering::Relaxed);
                        async { actix_web::HttpResponse::NoContent().finish() }
                    },
                ))
            })
            .workers(1)
            .bind("127.0.0.1:0")
            .expect("backend binds");
            let _ = addr_tx.send(server.addrs()[0]);
            let _ = server.run().await;
        });
    });
    let backend = addr_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the backend starts");
    // The buffer is split into the 8 lanes, and a publisher's messages
    // all take the lane its client id hashes to: several of the 8 share
    // one in some runs. Room for every message in each lane, so that the
    // row measures forwarding rather than which lanes the random ids
    // fell into (with 100,000 in all, 12,500 per lane, some runs dropped
    // ~5,800 messages as "buffer full" and then waited out the deadline).
    let buffer = 8 * n;
    let rule = format!(
        "[[rules]]\nname = \"fwd\"\nwhen = {{ topic = \"bench/fwd/#\" }}\nthen = [ {{ forward = {{ urls = [\"http://{backend}/in\"], in_flight = 8, buffer = {buffer} }} }} ]\n"
    );
    let dir = std::env::temp_dir().join(format!("wharf-bench-{}-forward", std::process::id()));
    let (s, url) = spawn_broker_in(args, &dir, &rule);
    let _bar = progress::scenario(format!("forward to a local backend, {n} messages"));
    let cpu = Cpu::start(Some(s.child.id()));
    let start = Instant::now();
    let each = n / publishers;
    let handles: Vec<_> = (0..publishers)
        .map(|p| {
            let (url, opts, size) = (url.clone(), options(args), args.size);
            std::thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let c = Client::connect(&url, opts)
                        .await
                        .expect("publisher connects");
                    let topic = format!("bench/fwd/{p}");
                    for i in 0..each {
                        if i % 500 == 499 {
                            c.publish_confirmed(&topic, vec![1u8; size])
                                .await
                                .expect("publish");
                        } else {
                            c.publish(&topic, vec![1u8; size]).await.expect("publish");
                        }
                    }
                    c.ping().await.expect("ping");
                })
            })
        })
        .collect();
    for h in handles {
        h.join().expect("publisher");
    }
    let total = each * publishers;
    let deadline = Instant::now() + Duration::from_secs(120);
    while count.load(Ordering::Relaxed) < total && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = start.elapsed();
    let (gen_cores, broker_cores) = cpu.cores();
    let got = count.load(Ordering::Relaxed);
    let rate = got as f64 / elapsed.as_secs_f64();
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
    Row {
        scenario: "forward to a local HTTP backend, 8 in flight, 8 publishers".into(),
        result: format!("{rate:.0} msg/s ({got} of {total} arrived)"),
        gen_cores,
        broker_cores,
    }
}
