//! `wharf pub` and `wharf sub`: topics over the native WebSocket protocol
//! with [`wharf::client::Client`].

use std::io::Write;
use std::time::Duration;

use clap::Args;
use wharf::client::{Client, ClientError};
use wharf::protocol::frame::{Headers, Message, Priority};

use super::{CliError, Conn, Wait, progress};

/// Confirmed publishes kept in flight by `--count` and `--lines`.
const WINDOW: usize = 64;

/// `wharf pub TOPIC [MSG|-]`.
#[derive(Args, Debug)]
pub struct PubArgs {
    /// The topic.
    pub topic: String,
    /// The message; `-` reads all of standard input as one message.
    pub message: Option<String>,
    /// Each line of standard input is a message.
    #[arg(long, conflicts_with_all = ["message", "count"])]
    pub lines: bool,
    /// Publish the message this many times.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub count: u64,
    /// Retain it as the topic's last value (on disk before the answer).
    #[arg(long)]
    pub retain: bool,
    /// A message header, NAME=VALUE (repeatable).
    #[arg(long = "header", value_name = "NAME=VALUE")]
    pub headers: Vec<String>,
    /// Where the broker is.
    #[command(flatten)]
    pub conn: Conn,
    /// How long to wait for answers.
    #[command(flatten)]
    pub wait: Wait,
}

/// `wharf sub FILTER...`.
#[derive(Args, Debug)]
pub struct SubArgs {
    /// Topic filters (`+` one level, `#` the rest).
    #[arg(required = true)]
    pub filters: Vec<String>,
    /// One JSON object per line: `{"topic","payload","headers"}`
    /// (`payload_base64` instead of `payload` when not UTF-8).
    #[arg(long)]
    pub json: bool,
    /// Exit after this many messages.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Exit after this many seconds (non-zero when fewer than `--count`
    /// arrived).
    #[arg(long, value_name = "SECS", value_parser = super::seconds)]
    pub timeout: Option<Duration>,
    /// Where the broker is.
    #[command(flatten)]
    pub conn: Conn,
}

/// Connects the native client to `conn`'s broker.
pub(super) async fn connect(conn: &Conn, timeout: Duration) -> Result<(Client, String), CliError> {
    let url = conn.ws_url()?;
    let options = conn.client_options(timeout)?;
    let client = Client::connect(&url, options)
        .await
        .map_err(|e| CliError::client(e, &url, conn.token.is_some()))?;
    Ok((client, url))
}

/// Runs `wharf pub`.
pub async fn publish(args: PubArgs) -> Result<(), CliError> {
    let headers = super::parse_headers(&args.headers)?;
    if args.count == 0 {
        return Err(CliError::usage("--count must be at least 1"));
    }
    let lines = if args.lines {
        Some(stdin_lines())
    } else {
        None
    };
    let payload = match lines {
        Some(_) => Vec::new(),
        None => super::message_or_stdin(args.message.as_deref())?,
    };
    let (client, url) = connect(&args.conn, args.wait.timeout).await?;
    let fail = |e: ClientError| CliError::client(e, &url, args.conn.token.is_some());
    let publish = |payload: Vec<u8>| {
        client.publish_with(
            &args.topic,
            payload,
            headers.clone(),
            args.retain,
            Priority::Normal,
            true,
        )
    };
    match lines {
        Some(mut rx) => {
            let spinner = progress::spinner("published");
            let mut batch = Vec::with_capacity(WINDOW);
            loop {
                // Whatever lines are waiting, up to a window, then wait for
                // their receipts together.
                let Some(first) = rx.recv().await else { break };
                batch.push(publish(first?));
                while batch.len() < WINDOW {
                    match rx.try_recv() {
                        Ok(line) => batch.push(publish(line?)),
                        Err(_) => break,
                    }
                }
                let n = batch.len() as u64;
                for r in futures_util::future::join_all(batch.drain(..)).await {
                    r.map_err(fail)?;
                }
                spinner.inc(n);
            }
            spinner.finish_and_clear();
        }
        None => {
            let bar = if args.count > 1 {
                progress::bar(args.count, "publishing")
            } else {
                indicatif::ProgressBar::hidden()
            };
            let mut left = args.count;
            while left > 0 {
                let n = left.min(WINDOW as u64);
                let sends = (0..n).map(|_| publish(payload.clone()));
                for r in futures_util::future::join_all(sends).await {
                    r.map_err(fail)?;
                }
                left -= n;
                bar.inc(n);
            }
            bar.finish_and_clear();
        }
    }
    // Everything was confirmed: a failed close changes nothing.
    let _ = client.close(false).await;
    Ok(())
}

/// Lines of standard input, read on a thread of their own (so a pipe that
/// stays open streams); the newline (and a `\r` before it) removed.
fn stdin_lines() -> tokio::sync::mpsc::Receiver<Result<Vec<u8>, CliError>> {
    let (tx, rx) = tokio::sync::mpsc::channel(WINDOW * 4);
    std::thread::spawn(move || {
        use std::io::BufRead;
        let stdin = std::io::stdin();
        let mut input = stdin.lock();
        loop {
            let mut line = Vec::new();
            match input.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                    }
                    if tx.blocking_send(Ok(line)).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let err = CliError::failed(format!("reading standard input: {e}"));
                    let _ = tx.blocking_send(Err(err));
                    break;
                }
            }
        }
    });
    rx
}

/// Runs `wharf sub`.
pub async fn subscribe(args: SubArgs) -> Result<(), CliError> {
    let connect_timeout = Duration::from_secs(10);
    let (client, url) = connect(&args.conn, connect_timeout).await?;
    let fail = |e: ClientError| CliError::client(e, &url, args.conn.token.is_some());
    // One channel for all the filters' messages, in arrival order.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(1024);
    for filter in &args.filters {
        let mut sub = client.subscribe(filter).await.map_err(fail)?;
        let tx = tx.clone();
        actix_rt::spawn(async move {
            while let Some(m) = sub.recv().await {
                if tx.send(m).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    let deadline = args.timeout.map(|t| actix_rt::time::Instant::now() + t);
    let expired = async {
        match deadline {
            Some(at) => actix_rt::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expired);
    let mut got = 0u64;
    let stdout = std::io::stdout();
    while args.count.is_none_or(|n| got < n) {
        let m = tokio::select! {
            m = rx.recv() => m,
            () = &mut expired => break,
        };
        let Some(m) = m else {
            return Err(CliError::failed(format!("{url} closed the connection")));
        };
        let line = if args.json {
            json_line(&m)
        } else {
            String::from_utf8_lossy(&m.payload).into_owned()
        };
        let mut out = stdout.lock();
        let written = writeln!(out, "{line}").and_then(|()| out.flush());
        if let Err(e) = written {
            // A closed stdout (`| head`) ends the command quietly.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(CliError::failed(format!("writing standard output: {e}")));
        }
        got += 1;
    }
    drop(client);
    match args.count {
        Some(n) if got < n => Err(CliError::failed(format!(
            "timeout: {got} of {n} messages within {}",
            super::error::secs(args.timeout.unwrap_or_default())
        ))),
        _ => Ok(()),
    }
}

/// `{"topic","payload"|"payload_base64","headers"}` of a message.
fn json_line(m: &Message) -> String {
    let mut obj = serde_json::Map::new();
    obj.insert("topic".into(), m.topic.clone().into());
    match std::str::from_utf8(&m.payload) {
        Ok(text) => obj.insert("payload".into(), text.into()),
        Err(_) => {
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD.encode(&m.payload);
            obj.insert("payload_base64".into(), b64.into())
        }
    };
    obj.insert("headers".into(), headers_json(&m.headers));
    serde_json::Value::Object(obj).to_string()
}

fn headers_json(h: &Headers) -> serde_json::Value {
    h.iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::from(v.clone())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &[u8]) -> Message {
        Message {
            sub: "s".into(),
            topic: "t/1".into(),
            seq: 1,
            payload: payload.to_vec(),
            headers: [("k".to_owned(), "v".to_owned())].into(),
            retained: false,
        }
    }

    #[test]
    fn json_lines() {
        assert_eq!(
            json_line(&message(b"hi")),
            r#"{"headers":{"k":"v"},"payload":"hi","topic":"t/1"}"#
        );
        assert!(json_line(&message(&[0xff])).contains(r#""payload_base64":"/w==""#));
    }
}
