//! `wharf queue ls|stat|peek|purge|redrive|move|enqueue` over the HTTP
//! API.

use std::io::IsTerminal;

use awc::http::Method;
use bytes::Bytes;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::http::{Body, Http, encode, query};
use super::table::{self, cell, clip};
use super::{CliError, Conn, Wait, progress};

/// `wharf queue ...`.
#[derive(Args, Debug)]
pub struct QueueArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: QueueCommand,
    /// Where the broker is.
    #[command(flatten)]
    pub conn: Conn,
    /// How long to wait for answers.
    #[command(flatten)]
    pub wait: Wait,
}

/// What to do with queues.
#[derive(Subcommand, Debug)]
pub enum QueueCommand {
    /// List the queues you may see, with their depths.
    Ls {
        /// The broker's JSON as it is.
        #[arg(long)]
        json: bool,
    },
    /// One queue's depths, consumers and counters.
    Stat {
        /// The queue.
        name: String,
        /// The broker's JSON as it is.
        #[arg(long)]
        json: bool,
    },
    /// Browse messages without consuming them.
    Peek {
        /// The queue (a dead-letter queue too).
        name: String,
        /// Start at this message id.
        #[arg(long, value_name = "SEQ")]
        from: Option<u64>,
        /// At most this many messages.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// The broker's JSON as it is.
        #[arg(long)]
        json: bool,
    },
    /// Delete every waiting message (asks first on a terminal).
    Purge {
        /// The queue.
        name: String,
        /// Do not ask.
        #[arg(long, short)]
        yes: bool,
    },
    /// Move a dead-letter queue's messages back (to their queue, or
    /// `--to`).
    Redrive {
        /// The dead-letter queue.
        name: String,
        /// The queue to move them to.
        #[arg(long, value_name = "QUEUE")]
        to: Option<String>,
    },
    /// Move one message (by its id, as peek shows it) to another queue.
    Move {
        /// The queue it is in.
        name: String,
        /// Its id.
        id: u64,
        /// The queue to move it to.
        #[arg(long, value_name = "QUEUE")]
        to: String,
    },
    /// Enqueue one message (durable before the answer); prints its id.
    Enqueue {
        /// The queue.
        name: String,
        /// The message; `-` reads all of standard input.
        message: Option<String>,
        /// Priority, 0-9.
        #[arg(long, value_name = "P")]
        priority: Option<u8>,
        /// Expire it after this many milliseconds.
        #[arg(long, value_name = "MS")]
        ttl_ms: Option<u64>,
        /// A message header, NAME=VALUE (repeatable).
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// The message's id: sent again with the same id within the
        /// queue's dedupe window, it is stored once (the first id is
        /// printed again).
        #[arg(long, value_name = "ID")]
        msg_id: Option<String>,
    },
}

/// Runs `wharf queue ...`.
pub async fn run(args: QueueArgs) -> Result<(), CliError> {
    let http = Http::new(&args.conn, args.wait.timeout)?;
    let path = |name: &str, tail: &str| format!("/queues/{}{tail}", encode(name, true));
    match args.command {
        QueueCommand::Ls { json } => {
            let all = http.get("/queues").await?;
            if json {
                return print_json(&all);
            }
            print!("{}", ls_table(&all));
        }
        QueueCommand::Stat { name, json } => {
            let info = http.get(&path(&name, "")).await?;
            if json {
                return print_json(&info);
            }
            print!("{}", stat_text(&info));
        }
        QueueCommand::Peek {
            name,
            from,
            limit,
            json,
        } => {
            let q = query(&[
                ("from", from.map(|v| v.to_string())),
                ("limit", limit.map(|v| v.to_string())),
            ]);
            let page = http.get(&path(&name, &format!("/messages{q}"))).await?;
            if json {
                return print_json(&page);
            }
            print!("{}", peek_table(&page));
            if let Some(next) = page["next"].as_u64() {
                eprintln!("more: --from {next}");
            }
        }
        QueueCommand::Purge { name, yes } => {
            if !yes && std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                let depth = http.get(&path(&name, "")).await?["depth"].clone();
                if !confirm(&format!(
                    "purge {} messages from queue {name:?}?",
                    cell(&depth)
                ))? {
                    return Err(CliError::failed("not purged"));
                }
            }
            let spinner = progress::spinner(&format!("purging {name}"));
            let answer = http
                .json(Method::DELETE, &path(&name, "/messages"), None)
                .await;
            spinner.finish_and_clear();
            let purged = answer?["purged"].clone();
            println!("purged {} messages from {name}", cell(&purged));
        }
        QueueCommand::Redrive { name, to } => {
            let q = query(&[("to", to)]);
            let moved = http
                .json(Method::POST, &path(&name, &format!("/redrive{q}")), None)
                .await?;
            println!("moved {} messages from {name}", cell(&moved["moved"]));
        }
        QueueCommand::Move { name, id, to } => {
            let q = query(&[("to", Some(to))]);
            let tail = format!("/messages/{id}/move{q}");
            let reply = http.json(Method::POST, &path(&name, &tail), None).await?;
            println!(
                "moved {name} #{id} to {} #{}",
                cell(&reply["queue"]),
                cell(&reply["id"])
            );
        }
        QueueCommand::Enqueue {
            name,
            message,
            priority,
            ttl_ms,
            headers,
            msg_id,
        } => {
            let mut headers = super::parse_headers(&headers)?;
            if let Some(id) = msg_id {
                headers.insert(wharf::broker::MSG_ID_HEADER.into(), id);
            }
            let payload = super::message_or_stdin(message.as_deref())?;
            let q = query(&[
                ("priority", priority.map(|v| v.to_string())),
                ("ttl_ms", ttl_ms.map(|v| v.to_string())),
            ]);
            let body = Body {
                content_type: "application/octet-stream",
                bytes: Bytes::from(payload),
                headers: headers
                    .into_iter()
                    .map(|(k, v)| (format!("{}{k}", wharf::transport::HEADER_PREFIX), v))
                    .collect(),
            };
            let reply = http
                .json(
                    Method::POST,
                    &path(&name, &format!("/messages{q}")),
                    Some(body),
                )
                .await?;
            println!("{}", cell(&reply["id"]));
        }
    }
    Ok(())
}

/// Prints a JSON value, pretty.
pub(super) fn print_json(v: &Value) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(v)
        .map_err(|e| CliError::failed(format!("cannot print the answer: {e}")))?;
    println!("{text}");
    Ok(())
}

/// Asks `question [y/N]` on stderr and reads the answer from stdin.
fn confirm(question: &str) -> Result<bool, CliError> {
    eprint!("{question} [y/N] ");
    let mut answer = String::new();
    std::io::stdin()
        .read_line(&mut answer)
        .map_err(|e| CliError::failed(format!("reading the answer: {e}")))?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// The table of `GET /queues`.
fn ls_table(all: &Value) -> String {
    let rows: Vec<Vec<String>> = all
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|q| {
            let dlq = match (&q["dead_letter"], &q["dead_letter_depth"]) {
                (Value::String(name), depth) => format!("{name} ({})", cell(depth)),
                _ => "-".to_owned(),
            };
            vec![
                cell(&q["name"]),
                cell(&q["depth"]),
                cell(&q["ready"]),
                cell(&q["delayed"]),
                cell(&q["on_disk"]),
                cell(&q["in_flight"]),
                cell(&q["consumers"]),
                dlq,
            ]
        })
        .collect();
    table::render(
        &[
            "NAME",
            "DEPTH",
            "READY",
            "DELAYED",
            "ON_DISK",
            "IN_FLIGHT",
            "CONSUMERS",
            "DEAD_LETTER",
        ],
        &rows,
    )
}

/// `key: value` lines of `GET /queues/{name}`.
fn stat_text(info: &Value) -> String {
    let mut rows = Vec::new();
    let mut add = |k: &str, v: &Value| rows.push(vec![format!("{k}:"), cell(v)]);
    for key in [
        "name",
        "depth",
        "ready",
        "delayed",
        "on_disk",
        "in_flight",
        "consumers",
        "dead_letter",
        "dead_letter_depth",
    ] {
        add(key, &info[key]);
    }
    if let Some(stats) = info["stats"].as_object() {
        for (k, v) in stats {
            add(k, v);
        }
    }
    // No header line: key and value only.
    let text = table::render(&["", ""], &rows);
    text.lines().skip(1).map(|l| format!("{l}\n")).collect()
}

/// The table of `GET /queues/{name}/messages`.
fn peek_table(page: &Value) -> String {
    let rows: Vec<Vec<String>> = page["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let payload = match (&m["payload"], &m["payload_base64"]) {
                (Value::String(text), _) => clip(text, 60),
                (_, Value::String(b64)) => format!("base64:{}", clip(b64, 53)),
                _ => String::new(),
            };
            let headers = m["headers"]
                .as_object()
                .map(|h| {
                    h.iter()
                        .map(|(k, v)| format!("{k}={}", cell(v)))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            vec![
                cell(&m["id"]),
                cell(&m["state"]),
                cell(&m["priority"]),
                cell(&m["deliveries"]),
                cell(&m["size"]),
                if headers.is_empty() {
                    "-".into()
                } else {
                    clip(&headers, 30)
                },
                payload,
            ]
        })
        .collect();
    table::render(
        &[
            "ID",
            "STATE",
            "PRI",
            "DELIVERIES",
            "SIZE",
            "HEADERS",
            "PAYLOAD",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables() {
        let ls = ls_table(&json!([{"name": "q", "depth": 3, "ready": 3, "delayed": 0,
            "on_disk": 0, "in_flight": 0, "consumers": 1, "dead_letter": "q.dlq",
            "dead_letter_depth": 2}]));
        assert!(
            ls.lines().nth(1).is_some_and(|l| l.contains("q.dlq (2)")),
            "{ls}"
        );
        let peek = peek_table(&json!({"queue": "q", "next": null, "messages": [
            {"id": 7, "state": "ready", "priority": 0, "deliveries": 0, "size": 2,
             "headers": {}, "payload": "hi"}]}));
        assert!(
            peek.lines()
                .nth(1)
                .is_some_and(|l| l.starts_with(" 7  ready")),
            "{peek}"
        );
        let stat = stat_text(&json!({"name": "q", "depth": 0, "stats": {"acked": 4}}));
        assert!(stat.contains("depth:") && stat.contains("acked:"), "{stat}");
    }
}
