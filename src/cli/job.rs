//! `wharf job enqueue|status|ls|retry|cancel` over the HTTP API.

use awc::http::Method;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::http::{Body, Http, encode, query};
use super::queue::print_json;
use super::table::{self, cell, unix_ms};
use super::{CliError, Conn, Wait};

/// `wharf job ...`.
#[derive(Args, Debug)]
pub struct JobArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: JobCommand,
    /// Where the broker is.
    #[command(flatten)]
    pub conn: Conn,
    /// How long to wait for answers.
    #[command(flatten)]
    pub wait: Wait,
}

/// What to do with jobs.
#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Enqueue a job (durable before the answer); prints its id.
    Enqueue {
        /// Its kind.
        kind: String,
        /// Its data as JSON; `-` reads it from standard input; none: null.
        data: Option<String>,
        /// Priority, 0-9.
        #[arg(long, value_name = "P")]
        priority: Option<u8>,
        /// The entity it is about (a UUID; default: a new one).
        #[arg(long, value_name = "UUID")]
        entity: Option<uuid::Uuid>,
        /// Execution timeout in milliseconds (default: the kind's).
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// The broker's JSON as it is.
        #[arg(long)]
        json: bool,
    },
    /// A job's record.
    Status {
        /// The job id.
        id: String,
        /// The broker's JSON as it is.
        #[arg(long)]
        json: bool,
    },
    /// List jobs, filtered by status and kind.
    Ls {
        /// Only jobs in this status (queued, running, failed, timed_out,
        /// succeeded, dead, cancelled).
        #[arg(long)]
        status: Option<String>,
        /// Only jobs of this kind.
        #[arg(long)]
        kind: Option<String>,
        /// The page after this job id (the previous page's `next`).
        #[arg(long, value_name = "ID")]
        after: Option<String>,
        /// At most this many jobs.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// The broker's JSON as it is.
        #[arg(long)]
        json: bool,
    },
    /// Queue a dead or cancelled job again (a failed one at once).
    Retry {
        /// The job id.
        id: String,
    },
    /// Cancel a job that has not finished.
    Cancel {
        /// The job id.
        id: String,
    },
}

/// Runs `wharf job ...`.
pub async fn run(args: JobArgs) -> Result<(), CliError> {
    let http = Http::new(&args.conn, args.wait.timeout)?;
    let job_path = |id: &str, tail: &str| format!("/jobs/{}{tail}", encode(id, false));
    match args.command {
        JobCommand::Enqueue {
            kind,
            data,
            priority,
            entity,
            timeout_ms,
            json,
        } => {
            let data = match data.as_deref() {
                None => Value::Null,
                Some(text) => {
                    let bytes = match text {
                        "-" => super::read_stdin()?,
                        text => text.as_bytes().to_vec(),
                    };
                    serde_json::from_slice(&bytes)
                        .map_err(|e| CliError::usage(format!("the job's data is not JSON: {e}")))?
                }
            };
            let mut body = json!({
                "kind": kind,
                "entity_id": entity.unwrap_or_else(uuid::Uuid::now_v7),
                "data": data,
            });
            if let Some(p) = priority {
                body["priority"] = p.into();
            }
            if let Some(t) = timeout_ms {
                body["timeout_ms"] = t.into();
            }
            let reply = http
                .json(Method::POST, "/jobs", Some(Body::json(&body)))
                .await?;
            if json {
                return print_json(&reply);
            }
            println!("{}", cell(&reply["id"]));
        }
        JobCommand::Status { id, json } => {
            let view = http.get(&job_path(&id, "")).await?;
            if json {
                return print_json(&view);
            }
            print!("{}", status_text(&view));
        }
        JobCommand::Ls {
            status,
            kind,
            after,
            limit,
            json,
        } => {
            let q = query(&[
                ("status", status),
                ("kind", kind),
                ("after", after),
                ("limit", limit.map(|v| v.to_string())),
            ]);
            let page = http.get(&format!("/jobs{q}")).await?;
            if json {
                return print_json(&page);
            }
            print!("{}", ls_table(&page));
            if let Some(next) = page["next"].as_str() {
                eprintln!("more: --after {next}");
            }
        }
        JobCommand::Retry { id } => {
            let reply = http
                .json(Method::POST, &job_path(&id, "/retry"), None)
                .await?;
            println!("{}", outcome_line(&id, &reply));
        }
        JobCommand::Cancel { id } => {
            let reply = http
                .json(Method::POST, &job_path(&id, "/cancel"), None)
                .await?;
            println!("{}", outcome_line(&id, &reply));
        }
    }
    Ok(())
}

/// `ID STATUS` from an answer that names the status, else its JSON.
fn outcome_line(id: &str, reply: &Value) -> String {
    match reply["status"].as_str() {
        Some(status) => format!("{id} {status}"),
        None if reply.is_null() => format!("{id} done"),
        None => reply.to_string(),
    }
}

/// `key: value` lines of a job view, times in UTC.
fn status_text(view: &Value) -> String {
    let mut rows = Vec::new();
    for key in [
        "id",
        "kind",
        "status",
        "entity_id",
        "priority",
        "attempt",
        "worker_id",
        "started_ms",
        "timeout_ms",
        "retry_at_ms",
        "created_ms",
        "error",
    ] {
        let v = &view[key];
        if v.is_null() {
            continue;
        }
        // Times are shown as UTC dates, under a label that says so (not
        // the field's `_ms`, which names the JSON's milliseconds).
        let (label, text) = match (key, v.as_u64()) {
            ("started_ms", Some(ms)) => ("started (UTC)", unix_ms(ms)),
            ("retry_at_ms", Some(ms)) => ("retry at (UTC)", unix_ms(ms)),
            ("created_ms", Some(ms)) => ("created (UTC)", unix_ms(ms)),
            _ => (key, cell(v)),
        };
        rows.push(vec![format!("{label}:"), text]);
    }
    rows.push(vec!["data:".into(), view["data"].to_string()]);
    let text = table::render(&["", ""], &rows);
    text.lines().skip(1).map(|l| format!("{l}\n")).collect()
}

/// The table of `GET /jobs`.
fn ls_table(page: &Value) -> String {
    let rows: Vec<Vec<String>> = page["jobs"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|j| {
            vec![
                cell(&j["id"]),
                cell(&j["kind"]),
                cell(&j["status"]),
                cell(&j["priority"]),
                cell(&j["attempt"]),
                j["created_ms"].as_u64().map_or("-".into(), unix_ms),
            ]
        })
        .collect();
    table::render(
        &["ID", "KIND", "STATUS", "PRI", "ATTEMPT", "CREATED (UTC)"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views() {
        let v = json!({"id": "j1", "kind": "mail", "status": "queued", "attempt": 0,
            "created_ms": 0, "data": {"a": 1}});
        let text = status_text(&v);
        assert!(
            text.contains("status:")
                && text.contains("created (UTC):")
                && text.contains("1970-01-01"),
            "{text}"
        );
        assert!(!text.contains("created_ms"), "{text}");
        let ls = ls_table(&json!({"jobs": [v], "next": null}));
        assert!(
            ls.lines().nth(1).is_some_and(|l| l.starts_with("j1")),
            "{ls}"
        );
        assert_eq!(
            outcome_line("j1", &json!({"status": "queued"})),
            "j1 queued"
        );
    }
}
