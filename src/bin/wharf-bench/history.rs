//! The topic history scenarios (`--history-only`): native 1 -> 1 on a
//! topic without history against one under a `[[history]]` entry, on one
//! broker and interleaved, beside a broker with no `[[history]]` at all;
//! a subscriber recovering 10,000 missed messages; and the broker's
//! memory per topic with a full history.

use std::time::{Duration, Instant};

use wharf::client::Client;

use crate::{Args, Cpu, Row, options, progress, rss_kib, spawn_broker_in, throughput_rate};

/// Messages kept per topic in these scenarios.
const SIZE: usize = 10_000;

/// Every history scenario.
pub(crate) fn scenarios(args: &Args) -> Vec<Row> {
    let mut rows = Vec::new();
    let dir = std::env::temp_dir().join(format!("wharf-bench-{}-nohist", std::process::id()));
    let (plain, plain_url) = spawn_broker_in(args, &dir, "");
    let entry = format!("[[history]]\nfilter = \"hist/#\"\nsize = {SIZE}\n");
    let hdir = std::env::temp_dir().join(format!("wharf-bench-{}-hist", std::process::id()));
    let (kept, url) = spawn_broker_in(args, &hdir, &entry);
    let mut a = args.clone();
    // Three rounds, alternating, so that the machine's noise falls on
    // each alike; the best of each is reported.
    let mut best = [0f64; 3];
    let mut last: [Option<Row>; 3] = [None, None, None];
    for _ in 0..3 {
        for (i, (pid, url, topic)) in [
            (plain.child.id(), &plain_url, "bench/one"),
            (kept.child.id(), &url, "bench/one"),
            (kept.child.id(), &url, "hist/one"),
        ]
        .into_iter()
        .enumerate()
        {
            a.pid = Some(pid);
            let (row, rate) = throughput_rate(&a, url, topic, 1);
            if rate > best[i] {
                best[i] = rate;
                last[i] = Some(row);
            }
        }
    }
    let labels = [
        "1 -> 1, a broker without [[history]]",
        "1 -> 1, a topic without history, beside [[history]]",
        "1 -> 1, a topic with history (10,000 kept)",
    ];
    for (i, row) in last.into_iter().enumerate() {
        if let Some(mut row) = row {
            row.scenario = labels[i].into();
            row.result = format!(
                "{} ({:.0}% of no [[history]], best of 3)",
                row.result,
                100.0 * best[i] / best[0].max(1e-9)
            );
            rows.push(row);
        }
    }
    a.pid = Some(kept.child.id());
    rows.push(recovery(&a, &url));
    rows.push(memory(&a, &url, kept.child.id()));
    drop((plain, kept));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&hdir);
    rows
}

/// 10,000 messages published while nobody listens, then one subscriber
/// that recovers them all: the time from its subscribe to the last one.
fn recovery(args: &Args, url: &str) -> Row {
    let _bar = progress::scenario(format!("recovering {SIZE} missed messages"));
    let (url, opts, size) = (url.to_owned(), options(args), args.size);
    let cpu = Cpu::start(args.pid);
    let elapsed = actix_rt::System::new().block_on(async move {
        let c = Client::connect(&url, opts).await.expect("connect");
        let (first, answer) = c
            .subscribe_recovering("hist/recover", None)
            .await
            .expect("subscribe");
        drop(first);
        for i in 0..SIZE {
            if i + 1 == SIZE {
                c.publish_confirmed("hist/recover", vec![1u8; size])
                    .await
                    .expect("publish");
            } else {
                c.publish("hist/recover", vec![1u8; size])
                    .await
                    .expect("publish");
            }
        }
        let start = Instant::now();
        let (mut sub, got) = c
            .subscribe_recovering("hist/recover", Some((&answer.epoch, answer.offset)))
            .await
            .expect("recover");
        assert!(got.recovered, "{got:?}");
        let mut n = 0;
        while n < SIZE {
            match sub.recv_timeout(Duration::from_secs(30)).await {
                Some(_) => n += 1,
                None => break,
            }
        }
        (start.elapsed(), n)
    });
    let (gen_cores, broker_cores) = cpu.cores();
    Row {
        scenario: format!("recover {SIZE} missed messages, {size} B", size = args.size),
        result: format!(
            "{:.1} ms ({} of {SIZE} received)",
            elapsed.0.as_secs_f64() * 1000.0,
            elapsed.1
        ),
        gen_cores,
        broker_cores,
    }
}

/// The broker's memory after 1,000 topics with 100 messages each kept.
fn memory(args: &Args, url: &str, pid: u32) -> Row {
    let (topics, each) = (1000usize, 100usize);
    let _bar = progress::scenario(format!("{topics} topics x {each} kept messages"));
    let before = rss_kib(pid).unwrap_or(0);
    let (url, opts, size) = (url.to_owned(), options(args), args.size);
    let cpu = Cpu::start(Some(pid));
    actix_rt::System::new().block_on(async move {
        let c = Client::connect(&url, opts).await.expect("connect");
        for t in 0..topics {
            let topic = format!("hist/mem/{t}");
            for _ in 0..each {
                c.publish(&topic, vec![1u8; size]).await.expect("publish");
            }
        }
        c.ping().await.expect("ping");
    });
    let after = rss_kib(pid).unwrap_or(0);
    let (gen_cores, broker_cores) = cpu.cores();
    let per_topic = after.saturating_sub(before) as f64 / topics as f64;
    Row {
        scenario: format!("memory, {topics} topics x {each} kept messages of {size} B"),
        result: format!(
            "{per_topic:.1} KiB per topic ({:.0} B per message); RSS {before} -> {after} KiB",
            per_topic * 1024.0 / each as f64
        ),
        gen_cores,
        broker_cores,
    }
}
