//! The cluster scenarios: one publisher on node a and the fan-out's
//! subscribers all on a, or spread over a, b and c (three nodes joined by
//! a nats-server this run starts), against one node without a cluster;
//! publishes nobody reads (what being in a cluster costs a publish); the
//! delay of a hop to another node; and durable queue scenarios with
//! the queue homed on node b and the clients on a and c, against one
//! node. Broker CPU is summed over the nodes and nats-server, and given
//! per delivery.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Args, Row, cpu_seconds, latency_between, spawn_broker_in, throughput_spread};

/// A nats-server on a free loopback port, killed on drop.
struct Nats {
    child: Child,
    url: String,
    /// Its JetStream store, removed on drop.
    store: PathBuf,
}

impl Drop for Nats {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn start_nats() -> Option<Nats> {
    start_nats_with(free_port()?, "", &[])
}

fn free_port() -> Option<u16> {
    Some(
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .ok()?
            .port(),
    )
}

/// A nats-server with JetStream on `port` (its store named by `tag`),
/// with `extra` arguments; waits until it accepts.
fn start_nats_with(port: u16, tag: &str, extra: &[String]) -> Option<Nats> {
    let program = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("nats-server"));
    // With JetStream, as a cluster with retained messages runs it.
    let store = std::env::temp_dir().join(format!("wharf-bench-{}-nats{tag}", std::process::id()));
    let child = Command::new(program)
        .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
        .arg(&store)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let nats = Nats {
        child,
        url: format!("nats://127.0.0.1:{port}"),
        store,
    };
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(nats)
}

/// Three nats-servers routed into one NATS cluster with JetStream (the
/// streams' leader is elected when a stream is made).
fn start_nats_cluster() -> Option<Vec<Nats>> {
    let ports: Vec<(u16, u16)> = (0..3)
        .map(|_| Some((free_port()?, free_port()?)))
        .collect::<Option<_>>()?;
    let mut servers = Vec::new();
    for (i, (port, route)) in ports.iter().enumerate() {
        let routes: Vec<String> = ports
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(_, (_, r))| format!("nats://127.0.0.1:{r}"))
            .collect();
        let extra = [
            "-n".into(),
            format!("s{i}"),
            "--cluster_name".into(),
            "wharfbench".into(),
            "--cluster".into(),
            format!("nats://127.0.0.1:{route}"),
            "--routes".into(),
            routes.join(","),
        ];
        servers.push(start_nats_with(*port, &format!("-s{i}"), &extra)?);
    }
    Some(servers)
}

/// CPU seconds of several processes together.
fn cpu_of(pids: &[u32]) -> f64 {
    pids.iter().filter_map(|p| cpu_seconds(*p)).sum()
}

/// Runs `f` and puts the CPU of `pids` (in cores) in its row, with the
/// broker CPU per delivery when `rate` (deliveries/s) is known.
fn measured(pids: &[u32], f: impl FnOnce() -> (Row, Option<f64>)) -> Row {
    let (wall, before) = (Instant::now(), cpu_of(pids));
    let (mut row, rate) = f();
    let cores = (cpu_of(pids) - before) / wall.elapsed().as_secs_f64().max(1e-9);
    row.broker_cores = Some(cores);
    if let Some(rate) = rate.filter(|r| *r > 0.0) {
        row.result.push_str(&format!(
            ", {:.2} us of broker CPU per delivery",
            cores / rate * 1e6
        ));
    }
    row
}

/// [`measured`], with the share of `nats` (some of `pids`) said apart.
fn measured_split(pids: &[u32], nats: &[u32], f: impl FnOnce() -> (Row, Option<f64>)) -> Row {
    let (wall, before) = (Instant::now(), cpu_of(nats));
    let mut rate = None;
    let mut row = measured(pids, || {
        let (r, n) = f();
        rate = n;
        (r, n)
    });
    let cores = (cpu_of(nats) - before) / wall.elapsed().as_secs_f64().max(1e-9);
    if let Some(rate) = rate.filter(|r| *r > 0.0) {
        row.result.push_str(&format!(
            " ({:.2} us of it in nats-server)",
            cores / rate * 1e6
        ));
    }
    row
}

/// Publishes ten times `args.messages` on `topic` at `url` that nobody
/// subscribes to (they go fast: long enough to measure the CPU); the rate
/// is publishes per second.
fn publish_only(args: &Args, url: &str, topic: &str) -> (Row, Option<f64>) {
    let n = args.messages * 10;
    let bar = super::progress::counted(format!("1 -> 0, {} B", args.size), n as u64);
    let cpu = super::Cpu::start(args.pid);
    let start = Instant::now();
    let (url, topic, opts, payload) = (
        url.to_owned(),
        topic.to_owned(),
        super::options(args),
        vec![0x5au8; args.size],
    );
    actix_rt::System::new().block_on(async move {
        let c = wharf::client::Client::connect(&url, opts)
            .await
            .expect("publisher connects");
        super::publish_paced(&c, &topic, &payload, n, &bar.0).await;
    });
    let rate = n as f64 / start.elapsed().as_secs_f64().max(1e-9);
    let (gen_cores, broker_cores) = cpu.cores();
    let row = Row {
        scenario: format!("1 -> 0 (nobody subscribed), {} B", args.size),
        result: format!("{rate:.0} msg/s published"),
        gen_cores,
        broker_cores,
    };
    (row, Some(rate))
}

/// A row from [`measured`] whose rate counts publishes.
fn per_publish(mut row: Row) -> Row {
    row.result = row.result.replace("per delivery", "per publish");
    row
}

/// `GET /admin/cluster` of the node at `url` (null if it does not answer).
fn cluster_status(url: &str) -> serde_json::Value {
    use std::io::{Read, Write};
    let addr = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap_or_default();
    let mut response = String::new();
    let asked = std::net::TcpStream::connect(addr).and_then(|mut s| {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        // The broker answers only to the host names it serves.
        let ask =
            format!("GET /admin/cluster HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        s.write_all(ask.as_bytes())?;
        s.read_to_string(&mut response)
    });
    if asked.is_err() {
        return serde_json::Value::Null;
    }
    response
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// Says in `row` what the nodes at `urls` dropped (their buffer for NATS
/// full) and lost (they fell behind what came from NATS) during it.
fn with_losses(mut row: Row, urls: &[String], before: &[[u64; 4]]) -> Row {
    for (url, was) in urls.iter().zip(before) {
        let now = counts(&cluster_status(url));
        if std::env::var_os("DEBUG_STATUS").is_some() {
            eprintln!("{}", cluster_status(url));
        }
        let [d, l, r, p] = std::array::from_fn(|i| now[i].saturating_sub(was[i]));
        if d + l + r + p > 0 {
            let node = cluster_status(url)["node"]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            row.result.push_str(&format!(
                ", node {node} dropped {d}, lost {l}, resent {r}, ignored {p} repeats"
            ));
        }
    }
    row
}

/// What a node's status counts of messages that did not cross once:
/// dropped, lost, resent, repeats.
fn counts(s: &serde_json::Value) -> [u64; 4] {
    ["dropped", "lost", "resent", "repeats"].map(|k| s[k].as_u64().unwrap_or(0))
}

/// [`counts`] of each node at `urls`.
fn losses(urls: &[String]) -> Vec<[u64; 4]> {
    urls.iter().map(|u| counts(&cluster_status(u))).collect()
}

/// Waits, at most 15 s, until every node at `urls` says it sends NATS
/// only what other nodes want (past its warm-up; a node that does not
/// say, from before interest-based forwarding, is not waited for).
fn settled(urls: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(15);
    for url in urls {
        while Instant::now() < deadline {
            if cluster_status(url)["forwarding_all"] != true {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// The scenarios; none when nats-server is missing (said on stderr).
pub(crate) fn scenarios(args: &Args) -> Vec<Row> {
    let Some(nats) = start_nats() else {
        eprintln!("wharf-bench: nats-server did not start (Debian: apt-get install nats-server)");
        return Vec::new();
    };
    let base = std::env::temp_dir().join(format!("wharf-bench-{}-cluster", std::process::id()));
    let (single, single_url) = spawn_broker_in(args, &base.join("single"), "");
    let nodes: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|name| {
            spawn_broker_in(
                args,
                &base.join(name),
                &format!(
                    "[cluster]\nnats = [\"{}\"]\nnode = \"{name}\"\nmembers = [\"a\", \"b\", \"c\"]\n\n\
                     [[queues]]\nname = \"bench/roundtrip\"\nhome = \"b\"\n\n\
                     [[queues]]\nname = \"bench/enqueue/8/64\"\nhome = \"b\"\n",
                    nats.url
                ),
            )
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|(_, u)| u.clone()).collect();
    let mut pids: Vec<u32> = nodes.iter().map(|(s, _)| s.child.id()).collect();
    pids.push(nats.child.id());
    let mut a = args.clone();
    a.pid = None;
    let fan = args.fanout;
    let mut rows = Vec::new();
    let label = |mut r: Row, what: &str| {
        r.scenario = format!("{what}: {}", r.scenario);
        r
    };
    let (at_a, spread) = (&urls[..1], &urls[..]);
    rows.push(label(
        measured(&[single.child.id()], || {
            let (r, rate) = throughput_spread(
                &a,
                &single_url,
                std::slice::from_ref(&single_url),
                "bench/fan",
                fan,
            );
            (r, Some(rate))
        }),
        "one node, no cluster",
    ));
    rows.push(label(
        measured(&pids, || {
            let (r, rate) = throughput_spread(&a, &urls[0], at_a, "bench/fan", fan);
            (r, Some(rate))
        }),
        "cluster, every subscriber on a",
    ));
    let before = losses(&urls);
    let row = measured(&pids, || {
        let (r, rate) = throughput_spread(&a, &urls[0], spread, "bench/fan", fan);
        (r, Some(rate))
    });
    rows.push(label(
        with_losses(row, &urls, &before),
        "cluster, subscribers over a, b, c",
    ));
    // Publishes nobody reads, and one subscriber on another node: what
    // being in a cluster costs a publish (node and NATS CPU).
    settled(&urls);
    rows.push(label(
        per_publish(measured(&[single.child.id()], || {
            publish_only(&a, &single_url, "bench/alone")
        })),
        "one node, no cluster",
    ));
    rows.push(label(
        per_publish(measured(&pids, || {
            publish_only(&a, &urls[0], "bench/alone")
        })),
        "cluster, nobody on another node subscribed",
    ));
    let before = losses(&urls);
    let row = measured(&pids, || {
        let (r, rate) = throughput_spread(&a, &urls[0], &urls[1..2], "bench/remote", 1);
        (r, Some(rate))
    });
    rows.push(label(
        with_losses(row, &urls, &before),
        "cluster, one subscriber on b",
    ));
    rows.push(label(
        measured(&[single.child.id()], || {
            (latency_between(&a, &single_url, &single_url), None)
        }),
        "one node, no cluster",
    ));
    rows.push(label(
        measured(&pids, || (latency_between(&a, &urls[0], &urls[0]), None)),
        "cluster, publisher and subscriber on a",
    ));
    rows.push(label(
        measured(&pids, || (latency_between(&a, &urls[0], &urls[1]), None)),
        "cluster, publisher on a, subscriber on b",
    ));
    // Queues homed on b: the same queue scenarios on one node, and with
    // every client on other nodes than the queue's.
    if args.queue_messages > 0 {
        let flush = "always";
        rows.push(label(
            measured(&[single.child.id()], || {
                (crate::queues::enqueue(&a, &single_url, 8, 64, flush), None)
            }),
            "one node, no cluster",
        ));
        rows.push(label(
            measured(&pids, || {
                (crate::queues::enqueue(&a, &urls[0], 8, 64, flush), None)
            }),
            "cluster, publishers on a, queue homed on b",
        ));
        rows.push(label(
            measured(&[single.child.id()], || {
                let r = crate::queues::round_trip_between(
                    &a,
                    &single_url,
                    &single_url,
                    "bench/roundtrip",
                    flush,
                );
                (r, None)
            }),
            "one node, no cluster",
        ));
        rows.push(label(
            measured(&pids, || {
                let r = crate::queues::round_trip_between(
                    &a,
                    &urls[0],
                    &urls[2],
                    "bench/roundtrip",
                    flush,
                );
                (r, None)
            }),
            "cluster, publishers on a, consumers on c, queue homed on b",
        ));
    }
    drop(nodes);
    if args.queue_messages > 0 {
        rows.extend(failover(args, &base, &single_url, single.child.id()));
    }
    drop(single);
    let _ = std::fs::remove_dir_all(&base);
    rows
}

/// Durable queues with `[cluster] failover` on a three-server NATS
/// cluster (journal and leases on three replicas), beside one node
/// without a cluster and JetStream's own work queue on the same NATS
/// cluster, end to end.
fn failover(args: &Args, base: &std::path::Path, single_url: &str, single: u32) -> Vec<Row> {
    let Some(servers) = start_nats_cluster() else {
        eprintln!("wharf-bench: the NATS cluster did not start");
        return Vec::new();
    };
    let nats: Vec<String> = servers.iter().map(|n| format!("\"{}\"", n.url)).collect();
    let nodes: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .enumerate()
        .map(|(i, name)| {
            let mut mine = nats.clone();
            mine.rotate_left(i);
            spawn_broker_in(
                args,
                &base.join(format!("failover-{name}")),
                &format!(
                    "[cluster]\nnats = [{}]\nnode = \"{name}\"\nmembers = [\"a\", \"b\", \"c\"]\n\
                     failover = true\nreplicas = 3\n\n\
                     [[queues]]\nname = \"bench/roundtrip\"\nhome = \"b\"\n",
                    mine.join(", ")
                ),
            )
        })
        .collect();
    let urls: Vec<String> = nodes.iter().map(|(_, u)| u.clone()).collect();
    let nats_pids: Vec<u32> = servers.iter().map(|n| n.child.id()).collect();
    let mut pids: Vec<u32> = nodes.iter().map(|(s, _)| s.child.id()).collect();
    pids.extend(&nats_pids);
    let mut a = args.clone();
    a.pid = None;
    let label = |mut r: Row, what: &str| {
        r.scenario = format!("{what}: {}", r.scenario);
        r
    };
    let rate = |r: &Row| {
        r.result
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<f64>().ok())
    };
    let flush = "always";
    let mut rows = Vec::new();
    rows.push(label(
        measured(&[single], || {
            let r = crate::queues::round_trip_between(
                &a,
                single_url,
                single_url,
                "bench/roundtrip",
                flush,
            );
            let n = rate(&r);
            (r, n)
        }),
        "one node, no cluster",
    ));
    rows.push(label(
        measured_split(&pids, &nats_pids, || {
            let r =
                crate::queues::round_trip_between(&a, &urls[1], &urls[1], "bench/roundtrip", flush);
            let n = rate(&r);
            (r, n)
        }),
        "failover R3, clients on the queue's home b",
    ));
    rows.push(label(
        measured_split(&pids, &nats_pids, || {
            let r =
                crate::queues::round_trip_between(&a, &urls[0], &urls[2], "bench/roundtrip", flush);
            let n = rate(&r);
            (r, n)
        }),
        "failover R3, publishers on a, consumers on c, queue homed on b",
    ));
    drop(nodes);
    rows.push(label(
        measured(&nats_pids, || {
            let (r, n) = crate::jetstream::work_queue(&a, &servers[1].url, 3);
            (r, Some(n))
        }),
        "the same NATS cluster, no Wharf",
    ));
    rows
}
