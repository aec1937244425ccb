//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod proxy;
pub mod raw_mqtt;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` on this thread until it completes or `timeout` passes.
pub fn wait<F: Future>(fut: F, timeout: Duration) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    let deadline = Instant::now() + timeout;
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::park_timeout(deadline - now);
    }
}

/// Waits until `cond` holds, checking every millisecond, up to `timeout`.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    cond()
}

/// [`wait_until`] inside an actix system: yields to it between checks, so
/// the actors and tasks being waited for can run.
#[allow(dead_code)]
pub async fn eventually(timeout: Duration, cond: impl FnMut() -> bool) -> bool {
    eventually_every(Duration::from_millis(2), timeout, cond).await
}

/// [`eventually`], checking every `every` (a condition that costs a
/// request, say).
pub async fn eventually_every(
    every: Duration,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        actix_rt::time::sleep(every).await;
    }
    cond()
}

/// [`eventually`] for a condition that has to await (asking a resource
/// for its state, say).
#[allow(dead_code)]
pub async fn eventually_async<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        actix_rt::time::sleep(Duration::from_millis(2)).await;
    }
    cond().await
}

pub const LONG: Duration = Duration::from_secs(20);

/// A plain HTTP request with `Connection: close`: (status, body).
pub fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let (status, _, body) = http_request(addr, method, path, "", body);
    (status, body)
}

/// The value of one series (name and labels, as `/metrics` prints them)
/// on `b`'s `/metrics`.
pub fn metric(b: &TestBroker, series: &str) -> f64 {
    let (status, text) = http(b.addr, "GET", "/metrics", "");
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (name, v) = l.rsplit_once(' ')?;
            (name == series).then(|| v.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {series} in {text}"))
}

/// An HTTP request with `extra` header lines (each ending in `\r\n`):
/// (status, response head, body).
pub fn http_request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    extra: &str,
    body: &str,
) -> (u16, String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .expect("connect to the broker");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // One write: a request in pieces may still be arriving when a
    // broker that answers before reading the body (a refusal) closes,
    // and the close then resets the connection, answer and all.
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{extra}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    (status, head.to_owned(), body.to_owned())
}

/// Sends a WebSocket upgrade to `path` with `extra` header lines; the
/// stream and the response's head (empty if the server closed first).
pub fn ws_upgrade(
    addr: std::net::SocketAddr,
    path: &str,
    extra: &str,
) -> (std::net::TcpStream, String) {
    use std::io::{Read, Write};
    let mut t = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        t,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if t.read_exact(&mut byte).is_err() {
            break;
        }
        head.push(byte[0]);
    }
    (t, String::from_utf8_lossy(&head).into_owned())
}

/// A broker running in-process on an ephemeral loopback port, stopped (and
/// waited for) on drop.
pub struct TestBroker {
    pub addr: std::net::SocketAddr,
    /// The MQTT-over-TCP listener, when started with [`TestBroker::start_tcp`].
    pub mqtt_addr: Option<std::net::SocketAddr>,
    /// The MQTT-over-TLS listener, when `[server.tls]` was set too.
    pub mqtt_tls_addr: Option<std::net::SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// What SIGHUP is to the binary: re-read the keys and rules.
    reload: tokio::sync::mpsc::Sender<()>,
    thread: Option<thread::JoinHandle<Result<(), wharf::Error>>>,
    _dir: tempfile::TempDir,
}

impl TestBroker {
    /// Starts with the defaults, small pools, a temporary store, and
    /// whatever `tune` changes.
    pub fn start(tune: impl FnOnce(&mut wharf::Config)) -> TestBroker {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        Self::start_with(dir, &data, false, tune)
    }

    /// Like [`TestBroker::start`], also serving MQTT over TCP (and over
    /// TLS when `tune` sets `[server.tls]`) on free loopback ports.
    pub fn start_tcp(tune: impl FnOnce(&mut wharf::Config)) -> TestBroker {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        Self::start_with(dir, &data, true, tune)
    }

    /// Starts with its store in `data` (to test restarts).
    pub fn start_in(data: &std::path::Path, tune: impl FnOnce(&mut wharf::Config)) -> TestBroker {
        Self::start_with(tempfile::tempdir().unwrap(), data, false, tune)
    }

    fn start_with(
        dir: tempfile::TempDir,
        data: &std::path::Path,
        tcp: bool,
        tune: impl FnOnce(&mut wharf::Config),
    ) -> TestBroker {
        // The broker's warnings go to the test's output (shown when it
        // fails): a slow or stuck stop says which step it was at.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                std::env::var("WHARF_TEST_LOG").unwrap_or_else(|_| "wharf=warn".into()),
            )
            .with_test_writer()
            .try_init();
        let mut config = wharf::Config::default();
        config.store.data_dir = data.to_owned();
        config.store.cache_capacity_mb = 8;
        config.server.http_workers = 2;
        config.scheduler.workers = 2;
        config.server.shutdown_timeout_s = 2;
        // No MQTT TCP listener on 1883 unless a test asks (with port 0).
        config.mqtt.tcp_bind = String::new();
        tune(&mut config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let listeners = wharf::Listeners {
            http: listener,
            mqtt: tcp.then(free),
            mqtt_tls: (tcp && config.server.tls.enabled()).then(free),
        };
        let local = |l: &Option<std::net::TcpListener>| l.as_ref().map(|l| l.local_addr().unwrap());
        let (mqtt_addr, mqtt_tls_addr) = (local(&listeners.mqtt), local(&listeners.mqtt_tls));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (reloads, reload) = tokio::sync::mpsc::channel(1);
        let thread = thread::Builder::new()
            .name("test-broker".into())
            .spawn(move || {
                actix_rt::System::new().block_on(wharf::serve(
                    listeners,
                    config,
                    async {
                        let _ = stopped.await;
                    },
                    reload,
                ))
            })
            .unwrap();
        TestBroker {
            addr,
            mqtt_addr,
            mqtt_tls_addr,
            stop: Some(stop),
            reload: reloads,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Asks the broker to re-read its keys and rules, as SIGHUP asks the
    /// binary (the reload runs after this returns: wait for its effect).
    pub fn reload(&self) {
        self.reload.try_send(()).unwrap();
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/ws", self.addr)
    }

    /// Stops the broker and returns what `run` returned.
    pub fn stop(mut self) -> Result<(), wharf::Error> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Result<(), wharf::Error> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.thread.take() {
            Some(t) => {
                // A stop takes well under a second; a rare one under full
                // load has taken over 20 s (cause not found yet), so the
                // wait is long and a slow stop is reported.
                let started = Instant::now();
                let deadline = started + Duration::from_secs(60);
                while !t.is_finished() {
                    if Instant::now() >= deadline {
                        dump_threads();
                        panic!("broker did not stop");
                    }
                    thread::sleep(Duration::from_millis(10));
                }
                if started.elapsed() > Duration::from_secs(3) {
                    eprintln!("the broker took {:?} to stop", started.elapsed());
                }
                t.join().unwrap()
            }
            None => Ok(()),
        }
    }
}

/// Prints every thread of this process to stderr, so a broker that
/// hangs says where: each thread's name, state and kernel stack (from
/// /proc, at once), then the user stacks (gdb, when installed; bounded
/// at 60 s, since loading the symbols of a test binary is slow).
fn dump_threads() {
    let mut out = String::from("threads at the deadline:\n");
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let path = task.path();
            let read = |f: &str| std::fs::read_to_string(path.join(f)).unwrap_or_default();
            let state = read("stat");
            let state = state
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            let stack: Vec<String> = read("stack").lines().take(6).map(str::to_owned).collect();
            out.push_str(&format!(
                "  {} {:?} state {} wchan {}: {}\n",
                task.file_name().to_string_lossy(),
                read("comm").trim(),
                state.unwrap_or("?"),
                read("wchan").trim(),
                stack.join(" | ")
            ));
        }
    }
    eprintln!("{out}");
    // gdb's output goes to a file: gdb stops this process while it
    // works, so this process could not drain a pipe, and a full pipe
    // would hold gdb (and this process) for good.
    let file = std::env::temp_dir().join(format!("wharf-stacks-{}.txt", std::process::id()));
    let out = std::fs::File::create(&file);
    let gdb = out.and_then(|out| {
        let err = out.try_clone()?;
        std::process::Command::new("timeout")
            .args(["-k", "5", "60", "gdb", "-p"])
            .arg(std::process::id().to_string())
            .args(["-batch", "-nx", "-ex", "set pagination off"])
            .args(["-ex", "thread apply all bt"])
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .status()
    });
    match gdb {
        Ok(_) => {
            let stacks = std::fs::read_to_string(&file).unwrap_or_default();
            // The frames worth reading: Wharf's, actix's and tokio's.
            let lines: Vec<&str> = stacks
                .lines()
                .filter(|l| {
                    l.starts_with("Thread")
                        || ["wharf", "actix", "tokio", "sled", "mqtt", "park"]
                            .iter()
                            .any(|w| l.contains(w))
                })
                .collect();
            eprintln!("user stacks ({}):\n{}", file.display(), lines.join("\n"));
        }
        Err(e) => eprintln!("no user stacks (gdb: {e})"),
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Runs an async test body on a fresh actix system (the client needs one).
pub fn block_on<F: Future>(f: F) -> F::Output {
    actix_rt::System::new().block_on(f)
}

/// The `wharf` binary as a child process, with its stderr read line by line.
pub struct ChildBroker {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ChildBroker {
    pub fn spawn(args: &[&str]) -> ChildBroker {
        let mut args = args.to_vec();
        // Never the shared 1883: any free port, unless the test chose.
        if args.first() == Some(&"serve") && !args.contains(&"--mqtt-bind") {
            args.extend(["--mqtt-bind", "127.0.0.1:0"]);
        }
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_wharf"))
            .args(&args)
            .env("RUST_LOG", "info")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start wharf");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        thread::spawn(move || {
            for line in
                std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChildBroker { child, lines }
    }

    /// `wharf serve` on an ephemeral loopback port with its store in
    /// `data`.
    pub fn serve(data: &std::path::Path) -> ChildBroker {
        let data = data.to_str().expect("a UTF-8 path");
        ChildBroker::spawn(&["serve", "--bind", "127.0.0.1:0", "--data-dir", data])
    }

    /// `wharf serve --config CONFIG` on an ephemeral loopback port with
    /// its store in `data`.
    pub fn serve_config(config: &std::path::Path, data: &std::path::Path) -> ChildBroker {
        ChildBroker::spawn(&[
            "serve",
            "--config",
            config.to_str().expect("a UTF-8 path"),
            "--bind",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().expect("a UTF-8 path"),
        ])
    }

    /// Waits for the "listening on ADDR" log line and returns ADDR.
    pub fn address(&self) -> std::net::SocketAddr {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .expect("a 'listening on' line");
            if let Some(rest) = line.split("listening on ").nth(1) {
                let addr = rest.split_whitespace().next().unwrap();
                return addr.parse().expect("an address after 'listening on'");
            }
        }
    }

    /// Reads stderr lines until one contains `needle` or the process
    /// closes its stderr (it exited) or `timeout` passes: returns the lines
    /// read and whether `needle` was seen.
    pub fn read_until(&self, needle: &str, timeout: Duration) -> (String, bool) {
        let deadline = Instant::now() + timeout;
        let mut out = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    out.push_str(&line);
                    out.push('\n');
                    if line.contains(needle) {
                        return (out, true);
                    }
                }
                Err(_) => return (out, false),
            }
        }
    }

    pub fn signal(&self, sig: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                // What it was doing: the log lines not read yet.
                let log = self.stderr_rest();
                let lines: Vec<&str> = log.lines().collect();
                panic!(
                    "wharf did not exit within {timeout:?}; its last log lines:\n{}",
                    lines[lines.len().saturating_sub(60)..].join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr_rest(&self) -> String {
        let mut out = String::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_millis(500)) {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

impl Drop for ChildBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A CA and a certificate for 127.0.0.1 and localhost signed by it, as
/// PEM files in `dir`: (ca, cert, key).
pub fn make_certs(
    dir: &std::path::Path,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "Wharf test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .unwrap()
        .signed_by(&leaf_key, &ca, &ca_key)
        .unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("cert.pem"),
        dir.join("key.pem"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, leaf.pem()).unwrap();
    std::fs::write(&paths.2, leaf_key.serialize_pem()).unwrap();
    paths
}

/// The Python that runs the interop scripts: scripts/test installs Paho in
/// a virtual environment of its own and names its interpreter in
/// `WHARF_PYTHON`.
pub fn python() -> String {
    std::env::var("WHARF_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs an interop script of tests/interop with `port` (and more
/// arguments); it must exit 0.
pub fn interop(program: &str, script: &str, port: u16, more: &[&str]) {
    let path = format!("{}/tests/interop/{script}", env!("CARGO_MANIFEST_DIR"));
    let port = port.to_string();
    let mut args = vec![path.as_str(), port.as_str()];
    args.extend_from_slice(more);
    let out = std::process::Command::new(program)
        .args(&args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (scripts/test installs the clients): {e}"));
    assert!(
        out.status.success(),
        "{script} {more:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the Paho script with `port` and `more` until it prints
/// `connected`, stops the broker, and expects the script to exit 0 (it
/// checks what it was told on the way out).
pub fn paho_through_shutdown(b: TestBroker, port: u16, more: &[&str]) {
    use std::io::{BufRead, Read};
    let script = format!("{}/tests/interop/mqtt_paho.py", env!("CARGO_MANIFEST_DIR"));
    let port = port.to_string();
    let mut child = std::process::Command::new(python())
        .arg(&script)
        .arg(&port)
        .args(more)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs (scripts/test installs Paho)");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the script's first line");
    if line.trim() != "connected" {
        let mut rest = String::new();
        let _ = out.read_to_string(&mut rest);
        panic!("the script did not connect: {line}{rest}");
    }
    b.stop().expect("the broker stops");
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    assert!(child.wait().expect("the script ends").success(), "{rest}");
}
