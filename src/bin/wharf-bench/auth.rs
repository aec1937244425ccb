//! The login scenarios (`--auth-only`): how long a legitimate password
//! login takes while others flood the broker with wrong passwords from a
//! few addresses (each a loopback address of its own: 127.0.0.2, ...).
//! Each login is a first login of its own user (no remembered check), an
//! HTTP request with Basic credentials from 127.0.0.1; the flood's
//! guesses are the same requests with wrong passwords.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{Args, Cpu, Row, spawn_broker_in};

/// Logins measured per scenario.
const LOGINS: usize = 40;
/// The password of every user.
const PASSWORD: &str = "bench-password";

/// How the flood comes.
#[derive(Clone, Copy)]
enum Flood {
    /// No flood: the logins alone.
    None,
    /// `per` wrong passwords at once from each of `addresses`, again as
    /// soon as they are answered (the report's scenario: 400 from 4).
    Burst { addresses: u8, per: usize },
}

/// Every login scenario, in one run: no flood, the report's flood of 100
/// simultaneous guesses from each of 4 addresses, and 8 from each of 24.
pub(crate) fn scenarios(args: &Args) -> Vec<Row> {
    let hash = wharf::auth::hash_password(PASSWORD.as_bytes()).expect("hash");
    let mut users = String::new();
    for i in 0..LOGINS {
        users.push_str(&format!(
            "[[auth.users]]\nname = \"user-{i}\"\npassword_hash = \"{hash}\"\nallow = {{ publish = [\"home/%u/#\"] }}\n"
        ));
    }
    // No failure limit: the flood's every guess reaches the hashing pool
    // (with the limit, each address would be stopped after 10).
    let extra = format!("[auth]\nmax_failures = 0\n{users}");
    [
        ("no flood", Flood::None),
        (
            "4 addresses x 100 wrong passwords at once, repeated",
            Flood::Burst {
                addresses: 4,
                per: 100,
            },
        ),
        (
            "24 addresses x 8 wrong passwords at once, repeated",
            Flood::Burst {
                addresses: 24,
                per: 8,
            },
        ),
    ]
    .iter()
    .enumerate()
    .map(|(i, (label, flood))| {
        let dir = std::env::temp_dir().join(format!("wharf-bench-{}-auth-{i}", std::process::id()));
        let (s, url) = spawn_broker_in(args, &dir, &extra);
        let addr: SocketAddr = url
            .trim_start_matches("ws://")
            .trim_end_matches("/ws")
            .parse()
            .expect("broker address");
        let row = scenario(label, addr, *flood, Some(s.child.id()));
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
        row
    })
    .collect()
}

/// The status of `POST path` with `authorization`, sent from `from`; 0
/// when the exchange failed.
fn post_from(from: Ipv4Addr, to: SocketAddr, path: &str, authorization: &str) -> u16 {
    use std::io::{Read, Write};
    let exchange = || -> std::io::Result<u16> {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        socket.bind(&SocketAddr::from((from, 0)).into())?;
        socket.connect_timeout(&to.into(), Duration::from_secs(5))?;
        let mut t: std::net::TcpStream = socket.into();
        t.set_read_timeout(Some(Duration::from_secs(30)))?;
        write!(
            t,
            "POST {path} HTTP/1.1\r\nHost: {to}\r\nAuthorization: {authorization}\r\n\
             Content-Length: 1\r\nConnection: close\r\n\r\nx"
        )?;
        let mut head = [0u8; 12];
        t.read_exact(&mut head)?;
        Ok(std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0))
    };
    exchange().unwrap_or(0)
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine as _;
    let raw = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

fn scenario(label: &str, addr: SocketAddr, flood: Flood, pid: Option<u32>) -> Row {
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    if let Flood::Burst { addresses, per } = flood {
        for a in 0..addresses {
            for t in 0..per {
                let (stop, checked, refused) = (stop.clone(), checked.clone(), refused.clone());
                threads.push(std::thread::spawn(move || {
                    let from = Ipv4Addr::new(127, 0, 0, 2 + a);
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let wrong = basic("user-0", &format!("guess-{a}-{t}-{i}"));
                        match post_from(from, addr, "/topics/home/user-0/x", &wrong) {
                            401 => checked.fetch_add(1, Ordering::Relaxed),
                            _ => refused.fetch_add(1, Ordering::Relaxed),
                        };
                        i += 1;
                    }
                }));
            }
        }
        // Under way: guesses are being checked.
        let deadline = Instant::now() + Duration::from_secs(30);
        while checked.load(Ordering::Relaxed) < 8 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let cpu = Cpu::start(pid);
    let took = Mutex::new(Vec::with_capacity(LOGINS));
    let mut failed = 0;
    for i in 0..LOGINS {
        let started = Instant::now();
        let status = post_from(
            Ipv4Addr::LOCALHOST,
            addr,
            &format!("/topics/home/user-{i}/x"),
            &basic(&format!("user-{i}"), PASSWORD),
        );
        took.lock().expect("times").push(started.elapsed());
        if status != 202 {
            failed += 1;
        }
        // Logins come one after another, a little apart.
        std::thread::sleep(Duration::from_millis(50));
    }
    let (gen_cores, broker_cores) = cpu.cores();
    let wall = cpu_wall(&cpu);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let mut took = took.into_inner().expect("times");
    took.sort();
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let flood_text = match flood {
        Flood::None => String::new(),
        Flood::Burst { .. } => format!(
            "; flood: {:.0} guesses/s checked, {:.0}/s refused unchecked (503)",
            checked.load(Ordering::Relaxed) as f64 / wall,
            refused.load(Ordering::Relaxed) as f64 / wall,
        ),
    };
    Row {
        scenario: format!("login during a password flood: {label}"),
        result: format!(
            "{LOGINS} logins: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, {failed} refused{flood_text}",
            ms(at(0.5)),
            ms(at(0.99)),
            ms(at(1.0)),
        ),
        gen_cores,
        broker_cores,
    }
}

/// Seconds since `cpu` started.
fn cpu_wall(cpu: &Cpu) -> f64 {
    cpu.wall.elapsed().as_secs_f64()
}
