//! `wharf top`: the broker at a glance, redrawn every second from
//! `GET /admin/overview` and `GET /queues`, with publish and delivery
//! rates from the differences between two refreshes.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::Value;

use super::http::Http;
use super::table::{self, bytes, cell, uptime};
use super::{CliError, Conn, Wait};

/// `wharf top`.
#[derive(Args, Debug)]
pub struct TopArgs {
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long, value_name = "N")]
    pub iterations: Option<u64>,
    /// Seconds between refreshes.
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = super::seconds)]
    pub interval: Duration,
    /// Queues shown, deepest first.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub queues: usize,
    /// Where the broker is.
    #[command(flatten)]
    pub conn: Conn,
    /// How long to wait for answers.
    #[command(flatten)]
    pub wait: Wait,
}

/// The counters of the previous refresh, for rates.
struct Sample {
    at: Instant,
    published: u64,
    delivered: u64,
}

/// Runs `wharf top`.
pub async fn run(args: TopArgs) -> Result<(), CliError> {
    let http = Http::new(&args.conn, args.wait.timeout)?;
    let tty = std::io::stdout().is_terminal();
    let interval = args.interval.max(Duration::from_millis(100));
    let mut previous: Option<Sample> = None;
    let mut done = 0u64;
    let ctrl_c = actix_rt::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    if tty {
        // Hide the cursor while drawing.
        print!("\x1b[?25l");
    }
    let result = loop {
        let started = Instant::now();
        let fetched = tokio::select! {
            r = fetch(&http) => r,
            _ = &mut ctrl_c => break Ok(()),
        };
        let (overview, queues) = match fetched {
            Ok(v) => v,
            // Once the view is up, a broker that stops answering (a
            // restart) is shown and asked again; before, it is the answer.
            Err(e) if previous.is_some() && tty => {
                println!("\x1b[H\x1b[2Jwharf: {} (retrying)", e.text);
                let _ = std::io::stdout().flush();
                done += 1;
                if args.iterations.is_some_and(|n| done >= n) {
                    break Err(e);
                }
                tokio::select! {
                    () = actix_rt::time::sleep(interval) => continue,
                    _ = &mut ctrl_c => break Ok(()),
                }
            }
            Err(e) => break Err(e),
        };
        let now = Sample {
            at: Instant::now(),
            published: overview["published"].as_u64().unwrap_or(0),
            delivered: overview["delivered"].as_u64().unwrap_or(0),
        };
        let frame = render(
            http.base(),
            &overview,
            &queues,
            previous.as_ref(),
            &now,
            args.queues,
        );
        let mut out = std::io::stdout().lock();
        let written = if tty {
            write!(out, "\x1b[H\x1b[2J{frame}")
        } else {
            writeln!(out, "{frame}")
        };
        if written.and_then(|()| out.flush()).is_err() {
            // A closed stdout ends the view.
            break Ok(());
        }
        drop(out);
        previous = Some(now);
        done += 1;
        if args.iterations.is_some_and(|n| done >= n) {
            break Ok(());
        }
        let pause = interval.saturating_sub(started.elapsed());
        tokio::select! {
            () = actix_rt::time::sleep(pause) => {}
            _ = &mut ctrl_c => break Ok(()),
        }
    };
    if tty {
        print!("\x1b[?25h");
        let _ = std::io::stdout().flush();
    }
    result
}

async fn fetch(http: &Http) -> Result<(Value, Value), CliError> {
    let overview = http.get("/admin/overview").await?;
    let queues = http.get("/queues").await?;
    Ok((overview, queues))
}

/// One screen.
fn render(
    url: &str,
    o: &Value,
    queues: &Value,
    previous: Option<&Sample>,
    now: &Sample,
    max_queues: usize,
) -> String {
    let rate = |f: fn(&Sample) -> u64| match previous {
        Some(p) => {
            let secs = now.at.duration_since(p.at).as_secs_f64().max(1e-3);
            format!("{:.0}/s", f(now).saturating_sub(f(p)) as f64 / secs)
        }
        None => "-/s".to_owned(),
    };
    let mut s = String::new();
    s.push_str(&format!(
        "wharf {} at {url}   up {}\n",
        cell(&o["version"]),
        uptime(o["uptime_s"].as_u64().unwrap_or(0))
    ));
    s.push_str(&format!(
        "sessions: {} native, {} mqtt   topics: {} ({} wildcard subscriptions)   queues: {}\n",
        cell(&o["sessions"]["native"]),
        cell(&o["sessions"]["mqtt"]),
        cell(&o["topics"]),
        cell(&o["wildcard_subscriptions"]),
        cell(&o["queues"]),
    ));
    s.push_str(&format!(
        "publish: {} ({} total)   delivery: {} ({} total)\n",
        rate(|x| x.published),
        now.published,
        rate(|x| x.delivered),
        now.delivered,
    ));
    let memory = o["resident_bytes"].as_u64().map_or("-".into(), bytes);
    s.push_str(&format!("memory: {memory} resident\n"));
    let c = &o["cluster"];
    if c.is_object() {
        let conflicts = c["conflicts"].as_u64().unwrap_or(0);
        s.push_str(&format!(
            "cluster: node {}, {}, {} up, {} lost, {} buffered{}\n",
            cell(&c["node"]),
            if c["connected"] == true {
                "connected"
            } else {
                "NATS away"
            },
            cell(&c["peers_up"]),
            cell(&c["peers_lost"]),
            cell(&c["buffered"]),
            if conflicts > 0 {
                format!(", {conflicts} conflicts")
            } else {
                String::new()
            },
        ));
    }
    let j = &o["jobs"];
    if j.is_object() {
        s.push_str(&format!(
            "jobs: {} held, {} ready, {} running   workers: {} ({} waiting)\n",
            cell(&j["jobs"]),
            cell(&j["ready"]),
            cell(&j["running"]),
            cell(&j["workers"]),
            cell(&j["waiting"]),
        ));
    }
    let mut list: Vec<&Value> = queues
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    list.sort_by_key(|q| std::cmp::Reverse(q["depth"].as_u64().unwrap_or(0)));
    let rows: Vec<Vec<String>> = list
        .iter()
        .take(max_queues)
        .map(|q| {
            vec![
                cell(&q["name"]),
                cell(&q["depth"]),
                cell(&q["in_flight"]),
                cell(&q["consumers"]),
                cell(&q["dead_letter_depth"]),
            ]
        })
        .collect();
    s.push('\n');
    if rows.is_empty() {
        s.push_str("no queues\n");
    } else {
        s.push_str(&table::render(
            &["QUEUE", "DEPTH", "IN_FLIGHT", "CONSUMERS", "DLQ"],
            &rows,
        ));
        if list.len() > max_queues {
            s.push_str(&format!("... and {} more\n", list.len() - max_queues));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_screen() {
        let o = json!({"version": "0.1.0", "uptime_s": 61, "sessions": {"native": 2, "mqtt": 1},
            "topics": 3, "wildcard_subscriptions": 1, "queues": 1, "published": 300,
            "delivered": 500, "resident_bytes": 1048576,
            "jobs": {"jobs": 1, "ready": 1, "running": 0, "workers": 0, "waiting": 0}});
        let q = json!([{"name": "a", "depth": 1}, {"name": "b", "depth": 9}]);
        let t0 = Instant::now();
        let prev = Sample {
            at: t0,
            published: 100,
            delivered: 0,
        };
        let now = Sample {
            at: t0 + Duration::from_secs(2),
            published: 300,
            delivered: 500,
        };
        let s = render("http://x", &o, &q, Some(&prev), &now, 1);
        assert!(s.contains("up 1m 1s"), "{s}");
        assert!(s.contains("2 native, 1 mqtt"), "{s}");
        assert!(
            s.contains("publish: 100/s") && s.contains("delivery: 250/s"),
            "{s}"
        );
        assert!(s.contains("1.0 MiB"), "{s}");
        assert!(s.contains("\nb ") && s.contains("and 1 more"), "{s}");
        assert!(!s.contains("cluster"), "{s}");
        let mut o = o;
        o["cluster"] = json!({"node": "a", "connected": true, "peers_up": 2, "peers_lost": 1,
            "conflicts": 1, "buffered": 0});
        let s = render("http://x", &o, &q, Some(&prev), &now, 1);
        assert!(
            s.contains("cluster: node a, connected, 2 up, 1 lost, 0 buffered, 1 conflicts"),
            "{s}"
        );
    }
}
