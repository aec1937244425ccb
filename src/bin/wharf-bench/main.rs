//! Load generator for a running broker (Wharf's native protocol over
//! WebSocket): 1 -> 1 throughput, 1 -> N fan-out, and publish-to-delivery
//! latency at a fixed rate. Prints a table with the CPU used by the load
//! generator and by the broker, so that one can tell which was the limit.
//!
//! ```text
//! cargo build --release
//! cargo run --release --bin wharf-bench              # spawns target/release/wharf
//! cargo run --release --bin wharf-bench -- --url ws://127.0.0.1:7878/ws --pid 1234
//! ```

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod auth;
mod cluster;
mod history;
mod jetstream;
mod jobs;
mod mqtt;
mod progress;
mod queues;
mod rules;

use clap::Parser;
use wharf::client::{Client, ClientOptions};
use wharf::protocol::Format;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug, Clone)]
#[command(about = "Load generator for Wharf's native WebSocket protocol")]
struct Args {
    /// Broker WebSocket URL; without it, a broker is spawned on a free port.
    #[arg(long)]
    url: Option<String>,
    /// Broker process id, to report its CPU (set automatically when spawned).
    #[arg(long)]
    pid: Option<u32>,
    /// The wharf binary to spawn (default: next to this one).
    #[arg(long)]
    broker: Option<PathBuf>,
    /// Messages per throughput scenario.
    #[arg(long, default_value_t = 200_000)]
    messages: usize,
    /// Payload bytes.
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Subscribers in the fan-out scenario.
    #[arg(long, default_value_t = 50)]
    fanout: usize,
    /// Client threads the subscribers are spread over.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Messages per second in the latency scenario.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Seconds of the latency scenario.
    #[arg(long, default_value_t = 5)]
    latency_secs: u64,
    /// Publishers in the durable scenario.
    #[arg(long, default_value_t = 8)]
    durable_publishers: usize,
    /// Confirmed publishes each durable publisher keeps in flight.
    #[arg(long, default_value_t = 32)]
    durable_window: usize,
    /// Confirmed durable publishes per publisher.
    #[arg(long, default_value_t = 2000)]
    durable_messages: usize,
    /// Idle connections opened to measure the broker's memory per
    /// connection (0 skips it; needs the broker's pid).
    #[arg(long, default_value_t = 2000)]
    idle: usize,
    /// Encoding: bin or json.
    #[arg(long, default_value = "bin")]
    format: String,
    /// Durable enqueues per publisher in the queue scenarios.
    #[arg(long, default_value_t = 5000)]
    queue_messages: usize,
    /// Messages stored before the restart scenario (0 skips it; needs a
    /// spawned broker).
    #[arg(long, default_value_t = 1_000_000)]
    restart_messages: usize,
    /// Jobs stored (queued) before the restart scenario, beside its
    /// messages.
    #[arg(long, default_value_t = 100_000)]
    restart_jobs: usize,
    /// Only the queue and job scenarios.
    #[arg(long)]
    queues_only: bool,
    /// Only the enqueue + consume + ack queue scenario (with
    /// `--queues-only`: for profiling it alone).
    #[arg(long)]
    round_trip_only: bool,
    /// Messages per MQTT scenario (0 skips them).
    #[arg(long, default_value_t = 200_000)]
    mqtt_messages: usize,
    /// Point the MQTT scenarios at this URL (another broker's MQTT
    /// WebSocket listener, `ws://host:port/mqtt`, or TCP listener,
    /// `mqtt://host:port`) instead of Wharf's; only they run.
    #[arg(long)]
    mqtt_url: Option<String>,
    /// Wharf's MQTT-over-TCP listener (`host:port`), for the MQTT
    /// scenarios over TCP next to those over WebSocket; a broker
    /// wharf-bench starts gets a free port.
    #[arg(long)]
    mqtt_tcp: Option<String>,
    /// Only the MQTT scenarios.
    #[arg(long)]
    mqtt_only: bool,
    /// Only the MQTT QoS 0 1 -> 1 scenarios (with `--mqtt-only`: for
    /// profiling them alone).
    #[arg(long)]
    one_to_one_only: bool,
    /// A NATS server with JetStream (`nats://host:port`): the queue
    /// scenarios then run JetStream's own (R1: confirmed publishes from 8
    /// publishers, and a work queue end to end) beside Wharf's, in the
    /// same run.
    #[arg(long)]
    jetstream: Option<String>,
    /// Only the rules scenarios (each against brokers it starts).
    #[arg(long)]
    rules_only: bool,
    /// Only the cluster scenarios: three nodes joined by a nats-server it
    /// starts, against one node.
    #[arg(long)]
    cluster_only: bool,
    /// Only the topic history scenarios: 1 -> 1 with and without a
    /// history, recovery, memory (brokers it starts).
    #[arg(long)]
    history_only: bool,
    /// Only the login scenarios: password logins during floods of wrong
    /// passwords from several loopback addresses (brokers it starts).
    #[arg(long)]
    auth_only: bool,
    /// Jobs per jobs scenario (0 skips them).
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// A token (service token or JWT) every client presents: in hello,
    /// and as the MQTT password.
    #[arg(long)]
    token: Option<String>,
    /// A PEM CA certificate to trust for wss:// URLs.
    #[arg(long, value_name = "PEM")]
    ca: Option<PathBuf>,
}

/// CPU seconds (user + system) of a process, from /proc.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

pub(crate) struct Cpu {
    wall: Instant,
    own: f64,
    broker: Option<f64>,
    pid: Option<u32>,
}

impl Cpu {
    pub(crate) fn start(pid: Option<u32>) -> Cpu {
        Cpu {
            wall: Instant::now(),
            own: cpu_seconds(std::process::id()).unwrap_or(0.0),
            broker: pid.and_then(cpu_seconds),
            pid,
        }
    }

    /// (load generator cores, broker cores) used since `start`.
    pub(crate) fn cores(&self) -> (f64, Option<f64>) {
        let wall = self.wall.elapsed().as_secs_f64().max(1e-9);
        let own = (cpu_seconds(std::process::id()).unwrap_or(0.0) - self.own) / wall;
        let broker = match (self.pid.and_then(cpu_seconds), self.broker) {
            (Some(now), Some(then)) => Some((now - then) / wall),
            _ => None,
        };
        (own, broker)
    }
}

pub(crate) fn options(args: &Args) -> ClientOptions {
    ClientOptions {
        format: if args.format == "json" {
            Format::Json
        } else {
            Format::Bincode
        },
        timeout: Duration::from_secs(30),
        subscription_buffer: 65_536,
        token: args.token.clone(),
        tls: trust(args),
        ..ClientOptions::default()
    }
}

/// The TLS trust `--ca` asks for.
pub(crate) fn trust(args: &Args) -> Option<std::sync::Arc<rustls::ClientConfig>> {
    let ca = args.ca.as_ref()?;
    match wharf::tls::client_config(ca) {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("wharf-bench: --ca: {e}");
            std::process::exit(2);
        }
    }
}

pub(crate) struct Row {
    scenario: String,
    result: String,
    gen_cores: f64,
    broker_cores: Option<f64>,
}

/// Publishes between two confirmed ones in the throughput scenarios.
const CONFIRM_EVERY: usize = 2000;

/// One publisher, `subs` subscribers spread over client threads; returns
/// deliveries per second.
fn throughput(args: &Args, url: &str, topic: &str, subs: usize) -> Row {
    throughput_rate(args, url, topic, subs).0
}

/// [`throughput`], with the deliveries per second as a number.
pub(crate) fn throughput_rate(args: &Args, url: &str, topic: &str, subs: usize) -> (Row, f64) {
    throughput_spread(args, url, &[url.to_owned()], topic, subs)
}

/// [`throughput_rate`] with the publisher on `url` and the subscribers
/// spread over `sub_urls` in turn (cluster nodes).
pub(crate) fn throughput_spread(
    args: &Args,
    url: &str,
    sub_urls: &[String],
    topic: &str,
    subs: usize,
) -> (Row, f64) {
    let n = args.messages;
    let bar = progress::counted(format!("1 -> {subs}, {} B", args.size), n as u64);
    let threads = args.threads.clamp(1, subs.max(1));
    // Readiness by channel with a timeout: a subscriber thread that fails
    // must not leave the run waiting for ever.
    let (ready_tx, ready) = std::sync::mpsc::channel::<()>();
    let received = Arc::new(AtomicUsize::new(0));
    let done_at = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut handles = Vec::new();
    let mut first = 0;
    for t in 0..threads {
        let count = subs / threads + usize::from(t < subs % threads);
        let (topic, opts) = (topic.to_owned(), options(args));
        let urls: Vec<String> = (first..first + count)
            .map(|i| sub_urls[i % sub_urls.len()].clone())
            .collect();
        first += count;
        let (ready, received, done_at) = (ready_tx.clone(), received.clone(), done_at.clone());
        handles.push(std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let mut clients = Vec::new();
                let mut streams = Vec::new();
                for url in urls {
                    let c = Client::connect(&url, opts.clone())
                        .await
                        .expect("subscriber connects");
                    streams.push(c.subscribe(&topic).await.expect("subscribe"));
                    clients.push(c);
                }
                let _ = ready.send(());
                let tasks: Vec<_> = streams
                    .into_iter()
                    .map(|mut s| {
                        let (received, done_at) = (received.clone(), done_at.clone());
                        actix_rt::spawn(async move {
                            let mut got = 0;
                            while got < n {
                                // Take what has arrived without arming a
                                // timer; wait (bounded) only when empty.
                                if s.try_recv().is_some() {
                                    got += 1;
                                    continue;
                                }
                                match s.recv_timeout(Duration::from_secs(10)).await {
                                    Some(_) => got += 1,
                                    None => break,
                                }
                            }
                            received.fetch_add(got, Ordering::Relaxed);
                            done_at.fetch_max(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                        })
                    })
                    .collect();
                for t in tasks {
                    let _ = t.await;
                }
                drop(clients);
            })
        }));
    }
    for _ in 0..threads {
        ready
            .recv_timeout(Duration::from_secs(60))
            .expect("subscribers connected and subscribed within 60 s");
    }
    let cpu = Cpu::start(args.pid);
    let t0 = start.elapsed();
    let payload = vec![0x5au8; args.size];
    let publisher = {
        let (url, topic, opts) = (url.to_owned(), topic.to_owned(), options(args));
        let bar = bar.0.clone();
        std::thread::spawn(move || {
            actix_rt::System::new().block_on(async move {
                let c = Client::connect(&url, opts)
                    .await
                    .expect("publisher connects");
                publish_paced(&c, &topic, &payload, n, &bar).await;
            })
        })
    };
    publisher.join().expect("publisher thread");
    for h in handles {
        h.join().expect("subscriber thread");
    }
    let (gen_cores, broker_cores) = cpu.cores();
    let elapsed = Duration::from_nanos(done_at.load(Ordering::Relaxed)).saturating_sub(t0);
    let got = received.load(Ordering::Relaxed);
    let rate = got as f64 / elapsed.as_secs_f64().max(1e-9);
    let expected = n * subs;
    let lost = if got < expected {
        format!(", {} not delivered", expected - got)
    } else {
        String::new()
    };
    let row = Row {
        scenario: format!("1 -> {subs}, {} B", args.size),
        result: format!(
            "{:.0} deliveries/s ({:.0} msg/s published){lost}",
            rate,
            rate / subs as f64
        ),
        gen_cores,
        broker_cores,
    };
    (row, rate)
}

/// Publishes `n` copies of `payload` on `topic`, one confirmed publish
/// every [`CONFIRM_EVERY`] (ticking `bar`), then waits for a ping.
pub(crate) async fn publish_paced(
    c: &Client,
    topic: &str,
    payload: &[u8],
    n: usize,
    bar: &indicatif::ProgressBar,
) {
    // A confirmed publish now and then keeps the publisher
    // from running unboundedly ahead of the broker: at most two
    // windows ahead, as each confirmation is awaited only once
    // the next is sent (waiting for each at once drained the
    // pipeline every window and left the broker idle: 10-15%
    // of 1 -> 1).
    type Confirming<'a> = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), wharf::client::ClientError>> + 'a>,
    >;
    let mut confirming: Option<Confirming<'_>> = None;
    for i in 0..n {
        if i % CONFIRM_EVERY == CONFIRM_EVERY - 1 {
            let mut confirm: Confirming<'_> =
                Box::pin(c.publish_confirmed(topic, payload.to_vec()));
            // Polled once: the publish is on its way.
            let done = futures_util::FutureExt::now_or_never(&mut confirm);
            if let Some(previous) = confirming.take() {
                previous.await.expect("publish");
                bar.inc(CONFIRM_EVERY as u64);
            }
            match done {
                Some(r) => r.expect("publish"),
                None => confirming = Some(confirm),
            }
        } else {
            c.publish(topic, payload.to_vec()).await.expect("publish");
        }
    }
    if let Some(last) = confirming {
        last.await.expect("publish");
    }
    c.ping().await.expect("ping");
}

/// Publishes at `rate` for `secs` and measures publish-to-delivery delay.
fn latency(args: &Args, url: &str) -> Row {
    latency_between(args, url, url)
}

/// [`latency`] with the publisher on `url` and the subscriber on
/// `sub_url` (another cluster node).
pub(crate) fn latency_between(args: &Args, url: &str, sub_url: &str) -> Row {
    let (url, opts, rate, secs) = (url.to_owned(), options(args), args.rate, args.latency_secs);
    let sub_url = sub_url.to_owned();
    let _bar = progress::scenario(format!("latency at {rate} msg/s, {secs} s"));
    let cpu = Cpu::start(args.pid);
    let mut samples = actix_rt::System::new().block_on(async move {
        let base = Instant::now();
        let sub = Client::connect(&sub_url, opts.clone())
            .await
            .expect("subscriber connects");
        let mut s = sub.subscribe("bench/latency").await.expect("subscribe");
        let publisher = Client::connect(&url, opts)
            .await
            .expect("publisher connects");
        let total = rate * secs;
        let reader = actix_rt::spawn(async move {
            let mut samples = Vec::with_capacity(total as usize);
            while samples.len() < total as usize {
                let Some(m) = s.recv_timeout(Duration::from_secs(5)).await else {
                    break;
                };
                let sent = u64::from_le_bytes(m.payload[..8].try_into().unwrap_or([0; 8]));
                samples.push(base.elapsed().as_nanos() as u64 - sent);
            }
            samples
        });
        let interval = Duration::from_nanos(1_000_000_000 / rate.max(1));
        let mut tick = actix_rt::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        for _ in 0..total {
            tick.tick().await;
            let mut payload = (base.elapsed().as_nanos() as u64).to_le_bytes().to_vec();
            payload.resize(payload.len().max(64), 0);
            publisher
                .publish("bench/latency", payload)
                .await
                .expect("publish");
        }
        let samples = reader.await.unwrap_or_default();
        drop(sub);
        samples
    });
    let (gen_cores, broker_cores) = cpu.cores();
    samples.sort_unstable();
    let pct = |p: f64| -> f64 {
        if samples.is_empty() {
            return f64::NAN;
        }
        let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples[i] as f64 / 1000.0
    };
    Row {
        scenario: format!("latency at {} msg/s, {} s", args.rate, args.latency_secs),
        result: format!(
            "p50 {:.0} us, p99 {:.0} us, max {:.0} us ({} samples)",
            pct(0.5),
            pct(0.99),
            pct(1.0),
            samples.len()
        ),
        gen_cores,
        broker_cores,
    }
}

/// Publishers send retained messages with receipts (a receipt comes once
/// the message is on disk), each keeping a window in flight; returns
/// confirmed durable messages per second.
fn durable(args: &Args, url: &str, size: usize) -> Row {
    let _bar = progress::scenario(format!("durable retained, {size} B"));
    let cpu = Cpu::start(args.pid);
    let start = Instant::now();
    let (n, window) = (args.durable_messages, args.durable_window.max(1));
    let threads: Vec<_> = (0..args.durable_publishers)
        .map(|p| {
            let (url, opts) = (url.to_owned(), options(args));
            std::thread::spawn(move || {
                actix_rt::System::new().block_on(async move {
                    let c = Client::connect(&url, opts)
                        .await
                        .expect("publisher connects");
                    let payload = vec![0x5au8; size];
                    let mut sent = 0;
                    while sent < n {
                        let batch = window.min(n - sent);
                        let sends = (0..batch).map(|i| {
                            let topic = format!("bench/durable/{p}/{}", (sent + i) % 100);
                            let c = &c;
                            let payload = payload.clone();
                            async move { c.publish_retained(&topic, payload).await }
                        });
                        for r in futures_util::future::join_all(sends).await {
                            r.expect("durable publish");
                        }
                        sent += batch;
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().expect("publisher thread");
    }
    let elapsed = start.elapsed();
    let (gen_cores, broker_cores) = cpu.cores();
    let total = n * args.durable_publishers;
    Row {
        scenario: format!(
            "durable retained, {} publishers x {} in flight, {} B",
            args.durable_publishers, window, size
        ),
        result: format!(
            "{:.0} confirmed msg/s",
            total as f64 / elapsed.as_secs_f64()
        ),
        gen_cores,
        broker_cores,
    }
}

/// Resident memory of a process in KiB, from /proc.
pub(crate) fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Opens `args.idle` connections that say hello and subscribe, then sit;
/// returns the broker's resident memory per connection and how fast
/// they opened (a new connection that waits on anything shows there).
fn idle_connections(args: &Args, url: &str) -> Option<Row> {
    let pid = args.pid?;
    if args.idle == 0 {
        return None;
    }
    let _bar = progress::scenario(format!("{} idle connections", args.idle));
    let before = rss_kib(pid)?;
    let cpu = Cpu::start(args.pid);
    let (url, opts, n) = (url.to_owned(), options(args), args.idle);
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        actix_rt::System::new().block_on(async move {
            let mut clients = Vec::with_capacity(n);
            let opening = Instant::now();
            for i in 0..n {
                let c = Client::connect(&url, opts.clone())
                    .await
                    .expect("idle client connects");
                let s = c
                    .subscribe(&format!("bench/idle/{i}"))
                    .await
                    .expect("subscribe");
                clients.push((c, s));
            }
            let _ = tx.send(opening.elapsed());
            // Hold them until measured.
            let _ = actix_rt::task::spawn_blocking(move || done_rx.recv()).await;
            drop(clients);
        })
    });
    let opening = rx.recv().ok()?;
    std::thread::sleep(Duration::from_millis(500));
    let after = rss_kib(pid)?;
    let (gen_cores, broker_cores) = cpu.cores();
    let _ = done_tx.send(());
    let _ = holder.join();
    Some(Row {
        scenario: format!("{n} idle connections, each subscribed"),
        result: format!(
            "{:.1} KiB of broker memory per connection; opened at {:.0}/s \
             (connect, hello, subscribe; one after another)",
            after.saturating_sub(before) as f64 / n as f64,
            n as f64 / opening.as_secs_f64().max(1e-9)
        ),
        gen_cores,
        broker_cores,
    })
}

/// The broker spawned for the run: a free port, a temporary data dir.
struct Spawned {
    child: Child,
    _dir: PathBuf,
    /// Its MQTT-over-TCP listener.
    mqtt_tcp: String,
}

impl Spawned {
    /// Stops the broker (SIGTERM, wait) and keeps its data directory.
    fn stop_keeping_data(mut self) {
        self.terminate();
        self._dir = PathBuf::new();
    }

    /// SIGTERM, then wait for it to exit (a second call finds it gone).
    fn terminate(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.terminate();
        if !self._dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self._dir);
        }
    }
}

/// The wharf binary next to this one (or `--broker`).
fn broker_exe(args: &Args) -> PathBuf {
    args.broker.clone().unwrap_or_else(|| {
        std::env::current_exe()
            .expect("own path")
            .with_file_name("wharf")
    })
}

/// The config every spawned broker gets: no rate limit, a large outbound
/// bound, plus `extra`.
const BENCH_CONFIG: &str =
    "[session]\noutbound_limit = 268435456\nrate_per_s = 10000000\nrate_burst = 10000000\n";

fn spawn_broker(args: &Args) -> (Spawned, String) {
    let dir = std::env::temp_dir().join(format!("wharf-bench-{}", std::process::id()));
    spawn_broker_in(args, &dir, "")
}

/// Spawns a broker on a free port with its data in `dir/data` and waits
/// until it listens.
fn spawn_broker_in(args: &Args, dir: &std::path::Path, extra: &str) -> (Spawned, String) {
    spawn_broker_with(args, dir, &format!("{BENCH_CONFIG}{extra}"))
}

/// Spawns a broker with exactly `config` (not [`BENCH_CONFIG`]'s
/// settings) in `dir`, and waits until it listens.
fn spawn_broker_with(args: &Args, dir: &std::path::Path, config_text: &str) -> (Spawned, String) {
    use std::io::{BufRead, BufReader};
    let exe = broker_exe(args);
    let config = dir.join("bench.toml");
    std::fs::create_dir_all(dir).expect("bench dir");
    // A free port for MQTT over TCP (found by binding port 0, then freed).
    let mqtt_tcp = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.to_string())
        .unwrap_or_default();
    std::fs::write(&config, config_text).expect("bench config");
    let mut child = Command::new(&exe)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--mqtt-bind",
            &mqtt_tcp,
            "--config",
        ])
        .arg(&config)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn,wharf::server=info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {exe:?}: {e} (build it with cargo build --release)")
        });
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("broker output").expect("broker output");
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.split_whitespace().next().expect("address").to_owned();
        }
    };
    // The broker's warnings (a slow consumer, a dropped connection) go
    // to stderr: a run that lost messages says why.
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("broker: {line}");
            }
        }
    });
    (
        Spawned {
            child,
            _dir: dir.to_owned(),
            mqtt_tcp,
        },
        format!("ws://{addr}/ws"),
    )
}

fn main() {
    let mut args = Args::parse();
    // The spawned broker lives until main returns.
    let (_spawned, url) = match args.url.clone() {
        Some(url) => (None, url),
        None => {
            let (s, url) = spawn_broker(&args);
            args.pid = Some(s.child.id());
            args.mqtt_tcp.get_or_insert_with(|| s.mqtt_tcp.clone());
            (Some(s), url)
        }
    };
    // Wharf's MQTT scenarios: over WebSocket, and over TCP when there is
    // a TCP listener.
    let wharf_mqtt = |args: &Args| {
        let mut rows = mqtt::scenarios(args, &url.replace("/ws", "/mqtt"));
        if let Some(tcp) = args.mqtt_tcp.as_deref().filter(|t| !t.is_empty()) {
            rows.extend(mqtt::scenarios(args, &format!("mqtt://{tcp}")));
        }
        rows
    };
    println!(
        "broker: {url}  format: {}  payload: {} B",
        args.format, args.size
    );
    let mut rows = Vec::new();
    if let Some(mqtt_url) = &args.mqtt_url {
        print_rows(mqtt::scenarios(&args, mqtt_url));
        return;
    }
    if args.mqtt_only {
        let mut rows = wharf_mqtt(&args);
        if args.url.is_none() && !args.one_to_one_only {
            rows.extend(mqtt::default_rate(&args));
        }
        print_rows(rows);
        return;
    }
    if args.rules_only {
        print_rows(rules::scenarios(&args));
        return;
    }
    if args.cluster_only {
        print_rows(cluster::scenarios(&args));
        return;
    }
    if args.auth_only {
        print_rows(auth::scenarios(&args));
        return;
    }
    if args.history_only {
        print_rows(history::scenarios(&args));
        return;
    }
    if !args.queues_only {
        rows.extend([
            throughput(&args, &url, "bench/one", 1),
            throughput(&args, &url, "bench/fan", args.fanout),
        ]);
        // A count of 0 skips its scenario rather than print a row of zeros.
        if args.latency_secs > 0 {
            rows.push(latency(&args, &url));
        }
        if args.durable_messages > 0 {
            rows.extend([durable(&args, &url, 64), durable(&args, &url, 4096)]);
        }
    }
    if args.queue_messages > 0 {
        rows.extend(queues::scenarios(&args, &url, "always"));
        if let Some(js) = &args.jetstream {
            rows.push(jetstream::confirmed_publishes(&args, js, 1).0);
            rows.push(jetstream::work_queue(&args, js, 1).0);
        }
    }
    if args.jobs > 0 {
        rows.push(jobs::end_to_end(&args, &url, 1, args.jobs));
        rows.push(jobs::end_to_end(&args, &url, 8, args.jobs));
        rows.push(jobs::native_end_to_end(&args, &url, 8, 1, args.jobs));
        rows.push(jobs::native_end_to_end(&args, &url, 8, 8, args.jobs));
    }
    if args.url.is_none() {
        // The same against a broker that flushes on an interval.
        if args.queue_messages > 0 {
            let dir = std::env::temp_dir().join(format!("wharf-bench-{}-int", std::process::id()));
            let (s, url) = spawn_broker_in(&args, &dir, "[store]\nflush = \"interval\"\n");
            let mut a = args.clone();
            a.pid = Some(s.child.id());
            rows.extend(queues::scenarios(&a, &url, "interval"));
            drop(s);
        }
        if args.restart_messages > 0 {
            rows.extend(queues::restart(&args));
            rows.push(queues::drain_disk(&args, 100_000));
            if args.restart_messages > 100_000 {
                rows.push(queues::drain_disk(&args, args.restart_messages));
            }
        }
    }
    if !args.queues_only && args.mqtt_messages > 0 {
        rows.extend(wharf_mqtt(&args));
        if args.url.is_none() {
            rows.extend(mqtt::default_rate(&args));
        }
    }
    if !args.queues_only {
        rows.extend(idle_connections(&args, &url));
    }
    print_rows(rows);
}

fn print_rows(rows: Vec<Row>) {
    println!();
    println!("| scenario | result | load generator CPU | broker CPU |");
    println!("|---|---|---:|---:|");
    for r in rows {
        let broker = r
            .broker_cores
            .map_or("n/a".to_owned(), |c| format!("{c:.2} cores"));
        println!(
            "| {} | {} | {:.2} cores | {} |",
            r.scenario, r.result, r.gen_cores, broker
        );
    }
}
