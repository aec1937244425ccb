//! The server and the binary, over real sockets on loopback.

use crate::common;

use std::net::{SocketAddr, TcpListener};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use common::{ChildBroker, http};
use wharf::Config;
use wharf::transport::HealthReport;

fn test_config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.store.data_dir = dir.join("data");
    config.store.cache_capacity_mb = 8;
    config.server.http_workers = 1;
    config.scheduler.workers = 1;
    config.server.shutdown_timeout_s = 2;
    // No MQTT TCP listener on the shared 1883.
    config.mqtt.tcp_bind = String::new();
    config
}

/// Runs the broker in-process on an ephemeral port; returns its address, a
/// trigger for shutdown and the thread that yields `run`'s result.
fn start_in_process(
    config: Config,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    thread::JoinHandle<Result<(), wharf::Error>>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = thread::spawn(move || {
        actix_rt::System::new().block_on(wharf::run(listener, config, async {
            let _ = stop_rx.await;
        }))
    });
    (addr, stop_tx, handle)
}

fn join_within<T>(handle: thread::JoinHandle<T>, timeout: Duration) -> T {
    let deadline = Instant::now() + timeout;
    while !handle.is_finished() {
        assert!(Instant::now() < deadline, "did not stop within {timeout:?}");
        thread::sleep(Duration::from_millis(10));
    }
    handle.join().unwrap()
}

#[test]
fn health_reports_version_uptime_and_instance() {
    let tmp = tempfile::tempdir().unwrap();
    let (addr, stop, handle) = start_in_process(test_config(tmp.path()));
    let (status, body) = http(addr, "GET", "/health", "");
    assert_eq!(status, 200, "{body}");
    let report: HealthReport = serde_json::from_str(&body).unwrap();
    assert_eq!(report.status, "ok");
    assert_eq!(report.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(report.instance.get_version_num(), 7);
    thread::sleep(Duration::from_millis(30));
    let (_, again) = http(addr, "GET", "/health", "");
    let later: HealthReport = serde_json::from_str(&again).unwrap();
    assert!(
        later.uptime_ms >= report.uptime_ms + 20,
        "{report:?} then {later:?}"
    );
    assert_eq!(later.instance, report.instance);

    stop.send(()).unwrap();
    join_within(handle, Duration::from_secs(10)).expect("clean shutdown");
    assert!(TcpListener::bind(addr).is_ok() || std::net::TcpStream::connect(addr).is_err());
}

#[test]
fn unknown_routes_and_methods_answer_json_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let (addr, stop, handle) = start_in_process(test_config(tmp.path()));
    let (status, body) = http(addr, "GET", "/nope", "");
    assert_eq!(status, 404);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "not_found");
    let (status, body) = http(addr, "POST", "/health", "{}");
    assert_eq!(status, 405);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["error"]["code"], "method_not_allowed");
    assert!(v["error"]["message"].as_str().unwrap().contains("POST"));
    // The server still answers after errors.
    assert_eq!(http(addr, "GET", "/health", "").0, 200);
    stop.send(()).unwrap();
    join_within(handle, Duration::from_secs(10)).unwrap();
}

#[test]
fn run_refuses_an_invalid_config() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = test_config(tmp.path());
    config.scheduler.quantum = 0;
    let (_addr, _stop, handle) = start_in_process(config);
    match join_within(handle, Duration::from_secs(10)) {
        Err(wharf::Error::Config(e)) => assert!(e.to_string().contains("scheduler.quantum")),
        other => panic!("expected a config error, got {other:?}"),
    }
}

#[test]
fn binary_serves_on_an_ephemeral_port_and_stops_on_sigterm_and_sigint() {
    for sig in ["TERM", "INT"] {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let mut broker = ChildBroker::serve(&data);
        let addr = broker.address();
        assert_ne!(addr.port(), 0);
        let (status, body) = http(addr, "GET", "/health", "");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(env!("CARGO_PKG_VERSION")));
        broker.signal(sig);
        let status = broker.wait_exit(Duration::from_secs(20));
        assert_eq!(status.code(), Some(0), "SIG{sig}: {}", broker.stderr_rest());
        assert!(
            data.join("db").exists(),
            "the store was created in --data-dir"
        );
    }
}

#[test]
fn binary_refuses_bad_config_with_exit_status_2_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("[scheduler]\nquantom = 3\n", "quantom"),
        ("[scheduler]\nquantum = 0\n", "scheduler.quantum"),
        ("[server]\nbind = \"nowhere\"\n", "server.bind"),
        (
            "[store]\ncache_capacity_mb = \"big\"\n",
            "store.cache_capacity_mb",
        ),
    ];
    for (i, (toml, key)) in cases.iter().enumerate() {
        let path = tmp.path().join(format!("bad{i}.toml"));
        std::fs::write(&path, toml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
            .args(["serve", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{toml:?}: {stderr}");
        assert!(stderr.contains(key), "{toml:?}: {stderr}");
    }
    let missing = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["serve", "--config", "/nonexistent/wharf.toml"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
}

/// A listener on a non-loopback address with no authentication is
/// refused before it binds (exit 2, naming the key to set); with a token
/// configured the same address is accepted (checked without binding by
/// the library's own test).
#[test]
fn binary_refuses_an_open_non_loopback_listener() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["serve", "--bind", "0.0.0.0:0", "--data-dir"])
        .arg(tmp.path().join("d"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("auth.anonymous"), "{stderr}");
    assert!(
        !tmp.path().join("d").exists(),
        "refused before opening the store"
    );
}

/// `wharf passwd --stdin` prints an argon2id hash that verifies the
/// password; `wharf token` prints a token and its SHA-256.
#[test]
fn binary_prints_password_hashes_and_tokens() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["passwd", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"correct horse\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let hash = String::from_utf8(out.stdout).unwrap();
    let hash = hash.trim();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    let config = wharf::config::auth::AuthConfig {
        users: vec![wharf::config::auth::UserConfig {
            name: "u".into(),
            password_hash: hash.into(),
            allow: Default::default(),
        }],
        ..Default::default()
    };
    config.validate().unwrap();
    let auth = wharf::auth::Auth::new(&config).unwrap();
    let check = |pw: &'static [u8]| {
        actix_rt::System::new().block_on(auth.authenticate(
            wharf::auth::Credential::Password {
                user: "u",
                password: pw,
            },
            None,
            wharf::auth::Way::Http,
        ))
    };
    assert!(check(b"correct horse").is_ok());
    assert!(check(b"wrong").is_err());

    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .arg("token")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
            .unwrap()
    };
    let (token, digest) = (field("token:"), field("token_sha256:"));
    assert_eq!(wharf::auth::token_digest(&token), digest);
    assert!(token.len() > 40, "{token}");
}

#[test]
fn binary_prints_the_embedded_defaults() {
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .arg("config")
        .output()
        .unwrap();
    assert!(out.status.success());
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed, wharf::config::DEFAULT_TOML);
    assert_eq!(Config::from_toml(&printed).unwrap(), Config::default());
}

#[test]
fn binary_reports_a_port_in_use_and_exits_nonzero() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["serve", "--bind", &addr, "--data-dir"])
        .arg(tmp.path().join("d"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot bind"));
}

/// An MQTT port that is taken stops the start with the way out, said
/// once: `--mqtt-bind` to move it or turn it off.
#[test]
fn binary_says_how_to_move_a_taken_mqtt_port() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--mqtt-bind",
            &addr,
            "--data-dir",
        ])
        .arg(tmp.path().join("d"))
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!("cannot bind mqtt.tcp_bind = {addr}");
    assert_eq!(stderr.matches(&said).count(), 1, "said once: {stderr}");
    assert!(
        stderr.contains("--mqtt-bind 127.0.0.1:1884") && stderr.contains("--mqtt-bind \"\""),
        "{stderr}"
    );
    // No colours for a stderr that is not a terminal.
    assert!(!stderr.contains('\x1b'), "{stderr}");
}

/// `--bind` takes a host name; with port 0 the MQTT listener takes a
/// free port too (the test's own `--mqtt-bind` is left out on purpose).
#[test]
fn binary_binds_a_host_name_and_a_free_mqtt_port() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("d");
    let mut child = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["serve", "--bind", "localhost:0", "--data-dir"])
        .arg(&data)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    // Read to the end on a thread of its own: the broker keeps logging.
    let (tx, lines) = std::sync::mpsc::channel();
    thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut mqtt = None;
    let mut http = None;
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        if let Some(rest) = line.split("serving MQTT over TCP at ").nth(1) {
            mqtt = rest.split_whitespace().next().map(str::to_owned);
        }
        if let Some(rest) = line.split("listening on ").nth(1) {
            http = rest.split_whitespace().next().map(str::to_owned);
        }
        if mqtt.is_some() && http.is_some() {
            break;
        }
    }
    let (mqtt, http): (SocketAddr, SocketAddr) = (
        mqtt.expect("an MQTT address logged").parse().unwrap(),
        http.expect("an HTTP address logged").parse().unwrap(),
    );
    assert!(http.ip().is_loopback() && http.port() != 0, "{http}");
    assert!(mqtt.port() != 1883 && mqtt.port() != 0, "{mqtt}");
    // The MQTT listener answers.
    assert!(std::net::TcpStream::connect(mqtt).is_ok());
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "wharf did not stop");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Mistakes a newcomer makes on the command line are answered with the
/// right syntax.
#[test]
fn binary_answers_command_line_mistakes_with_the_syntax() {
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["serve", "--port", "9000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--bind 127.0.0.1:9000"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_wharf"))
        .args(["serve", "--bind", "localhost"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("expected HOST:PORT"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An HTTP request with an `Authorization: Bearer` header: the status.
fn bearer_status(addr: SocketAddr, method: &str, path: &str, token: &str) -> u16 {
    let auth = format!("Authorization: Bearer {token}\r\n");
    common::http_request(addr, method, path, &auth, "x").0
}

/// SIGHUP re-reads the JWKS file: a token signed with a key the file
/// did not hold is refused, then accepted once the file has it and the
/// binary got SIGHUP; a broken file keeps the keys in force.
#[test]
fn binary_reloads_jwt_keys_on_sighup() {
    use base64::Engine as _;
    let tmp = tempfile::tempdir().unwrap();
    let secret = "sighup-secret-0123456789abcdef-0123456";
    let k = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    let jwk = |kid: &str| format!(r#"{{"kty":"oct","alg":"HS256","kid":"{kid}","k":"{k}"}}"#);
    let jwks = tmp.path().join("jwks.json");
    std::fs::write(&jwks, format!(r#"{{"keys":[{}]}}"#, jwk("old"))).unwrap();
    let config = tmp.path().join("wharf.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\ndata_dir = {:?}\n[auth.jwt]\njwks_file = {:?}\n",
            tmp.path().join("data"),
            jwks
        ),
    )
    .unwrap();
    let mut broker = ChildBroker::spawn(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
    ]);
    let addr = broker.address();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("new".into());
    let token = jsonwebtoken::encode(
        &header,
        &serde_json::json!({"sub": "svc", "exp": exp, "wharf": {"publish": ["#"]}}),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap();
    assert_eq!(bearer_status(addr, "POST", "/topics/t", &token), 401);
    std::fs::write(&jwks, "{ broken").unwrap();
    broker.signal("HUP");
    let (log, seen) = broker.read_until("not reloaded", Duration::from_secs(10));
    assert!(seen, "{log}");
    std::fs::write(
        &jwks,
        format!(r#"{{"keys":[{},{}]}}"#, jwk("old"), jwk("new")),
    )
    .unwrap();
    broker.signal("HUP");
    let (log, seen) = broker.read_until("authentication keys reloaded", Duration::from_secs(10));
    assert!(seen, "{log}");
    assert_eq!(bearer_status(addr, "POST", "/topics/t", &token), 202);
    broker.signal("TERM");
    assert_eq!(broker.wait_exit(Duration::from_secs(20)).code(), Some(0));
}

#[test]
fn once_the_broker_stops_a_kept_alive_http_connection_is_closed_after_its_next_answer() {
    use std::io::{Read, Write};
    let b = common::TestBroker::start(|c| c.server.shutdown_timeout_s = 30);
    let addr = b.addr;
    let mut t = std::net::TcpStream::connect(addr).unwrap();
    t.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // One answer on a kept-alive connection: it stays open. An empty
    // answer: the broker had closed the connection already.
    let ask = |t: &mut std::net::TcpStream| -> String {
        if write!(t, "GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").is_err() {
            return String::new();
        }
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&got).contains("\"status\"") {
            match t.read(&mut buf) {
                Ok(0) => break,
                // Neither an answer nor a close: what this test is against.
                Err(e) => return format!("no answer and not closed: {e}"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).to_lowercase()
    };
    let first = ask(&mut t);
    assert!(first.starts_with("http/1.1 200"), "{first}");
    assert!(!first.contains("connection: close"), "{first}");
    // The stop begins (with a long graceful timeout, which this
    // connection must not hold up).
    let stopping = std::thread::spawn(move || b.stop());
    let deadline = Instant::now() + Duration::from_secs(20);
    let closed_early = loop {
        let answer = ask(&mut t);
        if answer.is_empty() {
            // Closed between two answers: it did not hold the stop up.
            break true;
        }
        if answer.contains("connection: close") {
            break false;
        }
        assert!(Instant::now() < deadline, "never told to close: {answer}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // ... and the broker closes it after that answer.
    if !closed_early {
        let mut rest = [0u8; 64];
        assert!(matches!(t.read(&mut rest), Ok(0)), "closed by the broker");
    }
    stopping.join().unwrap().expect("a clean stop");
}
