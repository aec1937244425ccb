//! Helpers shared by the integration tests.
#![allow(dead_code)]

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

pub const LONG: Duration = Duration::from_secs(20);

/// A minimal HTTP/1.1 exchange over a real socket: returns the status code
/// and the body. Enough for JSON endpoints that answer with Content-Length.
pub fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .expect("connect to the broker");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a complete response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    (status, body.to_owned())
}

/// A broker running in-process on an ephemeral loopback port, stopped (and
/// waited for) on drop.
pub struct TestBroker {
    pub addr: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<Result<(), wharf::Error>>>,
    _dir: tempfile::TempDir,
}

impl TestBroker {
    /// Starts with the defaults, small pools, a temporary store, and
    /// whatever `tune` changes.
    pub fn start(tune: impl FnOnce(&mut wharf::Config)) -> TestBroker {
        let dir = tempfile::tempdir().unwrap();
        let mut config = wharf::Config::default();
        config.store.data_dir = dir.path().join("data");
        config.store.cache_capacity_mb = 8;
        config.server.http_workers = 2;
        config.scheduler.workers = 2;
        config.server.shutdown_timeout_s = 2;
        tune(&mut config);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = thread::spawn(move || {
            actix_rt::System::new().block_on(wharf::run(listener, config, async {
                let _ = stopped.await;
            }))
        });
        TestBroker {
            addr,
            stop: Some(stop),
            thread: Some(thread),
            _dir: dir,
        }
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
                let deadline = Instant::now() + Duration::from_secs(20);
                while !t.is_finished() {
                    assert!(Instant::now() < deadline, "broker did not stop");
                    thread::sleep(Duration::from_millis(10));
                }
                t.join().unwrap()
            }
            None => Ok(()),
        }
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
