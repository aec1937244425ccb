//! `wharf cluster status`: one node's view of its cluster over the HTTP
//! API (`GET /admin/cluster`, which needs `admin`), for people and for
//! health checks: it exits 1 when something is wrong (the NATS link down,
//! a node not heard, another process with this node's name, nodes whose
//! `members` differ). Messages lost or dropped are counted since start:
//! shown, not a failure.

use clap::{Args, Subcommand};
use serde_json::Value;

use super::http::Http;
use super::table::{self, cell};
use super::{CliError, Conn, Wait};

/// `wharf cluster ...`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ClusterCommand,
    /// Where the broker is.
    #[command(flatten)]
    pub conn: Conn,
    /// How long to wait for answers.
    #[command(flatten)]
    pub wait: Wait,
}

/// What to look at.
#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// The node's link, the other nodes, the counters and any conflict;
    /// exits 1 when something is wrong.
    Status {
        /// The broker's JSON as it is.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `wharf cluster ...`.
pub async fn run(args: ClusterArgs) -> Result<(), CliError> {
    let http = Http::new(&args.conn, args.wait.timeout)?;
    match args.command {
        ClusterCommand::Status { json } => {
            let status = http.get("/admin/cluster").await?;
            if json {
                super::queue::print_json(&status)?;
            } else {
                print!("{}", status_text(&status));
            }
            let wrong = problems(&status);
            if wrong.is_empty() {
                Ok(())
            } else {
                Err(CliError::failed(format!("cluster: {}", wrong.join("; "))))
            }
        }
    }
}

/// What is wrong, in words (nothing on a healthy node or a single one).
fn problems(s: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if s["enabled"] != true {
        return out;
    }
    if s["state"] != "connected" {
        out.push(format!("the NATS link is {}", cell(&s["state"])));
    }
    for p in s["peers"].as_array().into_iter().flatten() {
        if p["up"] != true {
            out.push(format!("node {} not heard", cell(&p["node"])));
        }
    }
    if let Some(same) = s["same_name"].as_array().filter(|a| !a.is_empty()) {
        out.push(format!(
            "{} other process(es) use this node's name",
            same.len()
        ));
    }
    if let Some(other) = s["other_members"].as_object().filter(|m| !m.is_empty()) {
        let nodes: Vec<&str> = other.keys().map(String::as_str).collect();
        out.push(format!("members differ on {}", nodes.join(", ")));
    }
    // (lost, dropped, failed count since start: shown, not a failure
    // now, or the check would fail until a restart.)
    out
}

/// The status as a few lines and a table of the other nodes.
fn status_text(s: &Value) -> String {
    if s["enabled"] != true {
        return "not in a cluster ([cluster] nats is empty)\n".into();
    }
    let mut out = format!(
        "node {}  link {} ({} connects)  nats {}\n",
        cell(&s["node"]),
        cell(&s["state"]),
        cell(&s["connects"]),
        list(&s["nats"]),
    );
    if s["members"].as_array().is_some_and(|m| !m.is_empty()) {
        out.push_str(&format!(
            "members {}  jobs on {}  consumers here of queues elsewhere {}, elsewhere of queues here {}\n",
            list(&s["members"]),
            cell(&s["jobs_home"]),
            cell(&s["consumers_elsewhere"]),
            cell(&s["remote_consumers"]),
        ));
    }
    let counters = [
        "forwarded",
        "not_wanted",
        "received",
        "buffered",
        "dropped",
        "failed",
        "refused",
        "lost",
        "duplicates",
        "resent",
        "repeats",
        "invalid",
    ];
    let counted: Vec<String> = counters
        .iter()
        .map(|k| format!("{k} {}", cell(&s[*k])))
        .collect();
    out.push_str(&counted.join("  "));
    out.push('\n');
    let f = &s["failover"];
    if f.is_object() {
        out.push_str(&format!(
            "failover: home of {} (lease {} ms)  taken over {}  leases lost {}  journal appends {} ({} failed)\n",
            list(&f["leases"]),
            cell(&f["lease_ms"]),
            cell(&f["taken_over"]),
            cell(&f["leases_lost"]),
            cell(&f["journal_appended"]),
            cell(&f["journal_failed"]),
        ));
    }
    let rows: Vec<Vec<String>> = s["peers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let seen = p["last_seen_ms"].as_u64().map_or("-".to_owned(), |ms| {
                format!("{:.1} s ago", ms as f64 / 1000.0)
            });
            vec![
                cell(&p["node"]),
                if p["up"] == true { "up" } else { "NOT HEARD" }.to_owned(),
                seen,
            ]
        })
        .collect();
    if rows.is_empty() {
        out.push_str("no other node heard\n");
    } else {
        out.push_str(&table::render(&["NODE", "STATE", "LAST HEARD"], &rows));
    }
    for problem in problems(s) {
        out.push_str(&format!("! {problem}\n"));
    }
    out
}

fn list(v: &Value) -> String {
    let items: Vec<String> = v.as_array().into_iter().flatten().map(cell).collect();
    if items.is_empty() {
        "-".into()
    } else {
        items.join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_healthy_node_has_no_problem_and_a_sick_one_says_each() {
        let ok = serde_json::json!({"enabled": true, "node": "a", "state": "connected",
            "nats": ["nats://n:4222"], "connects": 1, "peers": [{"node": "b", "up": true, "last_seen_ms": 800}],
            "forwarded": 3, "lost": 0, "same_name": [], "other_members": {}});
        assert!(problems(&ok).is_empty());
        let text = status_text(&ok);
        assert!(
            text.contains("node a  link connected (1 connects)"),
            "{text}"
        );
        assert!(text.contains("b     up     0.8 s ago"), "{text}");
        assert!(!text.contains("failover"), "{text}");
        let mut failing_over = ok.clone();
        failing_over["failover"] = serde_json::json!({"lease_ms": 10000, "leases": ["orders", "jobs2"],
            "taken_over": 2, "leases_lost": 0, "journal_appended": 40, "journal_failed": 1});
        let text = status_text(&failing_over);
        assert!(
            text.contains("failover: home of orders,jobs2 (lease 10000 ms)  taken over 2"),
            "{text}"
        );
        let sick = serde_json::json!({"enabled": true, "node": "a", "state": "disconnected",
            "peers": [{"node": "b", "up": false}], "lost": 5, "same_name": ["x"],
            "other_members": {"c": ["a", "c"]}});
        let p = problems(&sick);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(problems(&serde_json::json!({"enabled": false})).is_empty());
    }
}
