//! The `wharf` binary's client commands: `pub`, `sub`, `queue`, `job`,
//! `cluster`, `top` and `completions`. Each group has its own file; this one holds
//! the connection options they share, the error they end with, and the
//! dispatch.
//!
//! WebSocket commands (`pub`, `sub`) use [`wharf::client::Client`] on
//! `ws(s)://HOST/ws`, derived from `--url`; the REST commands use awc
//! ([`http::Http`]). Every network wait is bounded.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};

mod cluster;
mod error;
mod http;
mod job;
mod progress;
mod pubsub;
mod queue;
mod table;
mod top;

pub use error::CliError;

/// Where the broker is and how to prove who we are; shared by every
/// client command (and global to a group's subcommands).
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// The broker's base URL (`http://` or `https://`; `ws://` and
    /// `wss://` mean the same broker).
    #[arg(
        long,
        global = true,
        env = "WHARF_URL",
        default_value = "http://127.0.0.1:7878",
        value_name = "URL"
    )]
    pub url: String,
    /// An API token or JWT: `Authorization: Bearer` on HTTP, the hello's
    /// token on WebSocket.
    #[arg(
        long,
        global = true,
        env = "WHARF_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// A PEM CA certificate to trust for https:// (and wss://) instead of
    /// the public roots.
    #[arg(long, global = true, value_name = "PEM")]
    pub ca: Option<PathBuf>,
}

impl Conn {
    /// The HTTP base URL, without a trailing slash.
    pub fn base(&self) -> Result<String, CliError> {
        let url = self.url.trim_end_matches('/');
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| CliError::usage(format!("--url {url:?}: expected http://HOST:PORT")))?;
        let scheme = match scheme {
            "http" | "ws" => "http",
            "https" | "wss" => "https",
            other => {
                return Err(CliError::usage(format!(
                    "--url {url:?}: unknown scheme {other:?} (http or https)"
                )));
            }
        };
        // A URL given as the WebSocket endpoint: the same broker.
        let rest = rest.strip_suffix("/ws").unwrap_or(rest);
        if rest.is_empty() {
            return Err(CliError::usage(format!("--url {url:?}: no host")));
        }
        Ok(format!("{scheme}://{rest}"))
    }

    /// The native WebSocket endpoint: `ws(s)://HOST[/prefix]/ws`.
    pub fn ws_url(&self) -> Result<String, CliError> {
        let base = self.base()?;
        let ws = match base.strip_prefix("https://") {
            Some(rest) => format!("wss://{rest}"),
            None => format!("ws://{}", base.trim_start_matches("http://")),
        };
        Ok(format!("{ws}/ws"))
    }

    /// What TLS trusts: `--ca`, else the public (webpki) roots; HTTP/1.1
    /// only.
    pub fn tls(&self) -> Result<Arc<rustls::ClientConfig>, CliError> {
        let roots = match &self.ca {
            Some(path) => {
                let mut roots = rustls::RootCertStore::empty();
                let certs = wharf::tls::read_certs(path)
                    .map_err(|e| CliError::usage(format!("--ca: {e}")))?;
                for cert in certs {
                    roots
                        .add(cert)
                        .map_err(|e| CliError::usage(format!("--ca {}: {e}", path.display())))?;
                }
                roots
            }
            None => rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            },
        };
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }

    /// Options for [`wharf::client::Client`]: the token, TLS trust for
    /// `wss://`, and `timeout` for every request.
    pub fn client_options(
        &self,
        timeout: Duration,
    ) -> Result<wharf::client::ClientOptions, CliError> {
        let tls = if self.base()?.starts_with("https://") {
            Some(self.tls()?)
        } else {
            None
        };
        Ok(wharf::client::ClientOptions {
            timeout,
            token: self.token.clone(),
            tls,
            ..wharf::client::ClientOptions::default()
        })
    }
}

/// `--timeout` of the request/response commands.
#[derive(Args, Debug, Clone)]
pub struct Wait {
    /// Seconds to wait for the broker's answers.
    #[arg(long, global = true, default_value = "10", value_name = "SECS", value_parser = seconds)]
    pub timeout: Duration,
}

/// Parses seconds (fractions allowed) into a duration.
pub fn seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?}: expected seconds >= 0"))
}

/// The client commands of the `wharf` binary.
#[derive(Subcommand, Debug)]
pub enum ClientCommand {
    /// Publish to a topic over WebSocket (confirmed: exit 0 means the
    /// broker took it).
    #[command(name = "pub")]
    Pub(pubsub::PubArgs),
    /// Subscribe to topic filters and print one message per line.
    Sub(pubsub::SubArgs),
    /// Look into and manage queues (HTTP).
    Queue(queue::QueueArgs),
    /// Enqueue jobs and look at them (HTTP).
    Job(job::JobArgs),
    /// A live view of the broker, refreshed every second.
    Top(top::TopArgs),
    /// This node's view of its cluster (HTTP; needs admin).
    Cluster(cluster::ClusterArgs),
    /// Print a shell completion script.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Runs a client command; `app` builds the whole command line (for the
/// completions). Prints `wharf: ...` on failure.
pub fn run(command: ClientCommand, app: fn() -> clap::Command) -> ExitCode {
    let result = match command {
        ClientCommand::Completions { shell } => {
            let mut app = app();
            clap_complete::generate(shell, &mut app, "wharf", &mut std::io::stdout());
            Ok(())
        }
        ClientCommand::Pub(args) => block_on(pubsub::publish(args)),
        ClientCommand::Sub(args) => block_on(pubsub::subscribe(args)),
        ClientCommand::Queue(args) => block_on(queue::run(args)),
        ClientCommand::Job(args) => block_on(job::run(args)),
        ClientCommand::Top(args) => block_on(top::run(args)),
        ClientCommand::Cluster(args) => block_on(cluster::run(args)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

/// Runs `fut` on a fresh actix system (the WebSocket client and awc need
/// one).
fn block_on<F: std::future::Future<Output = Result<(), CliError>>>(fut: F) -> Result<(), CliError> {
    actix_rt::System::new().block_on(fut)
}

/// Reads all of standard input.
fn read_stdin() -> Result<Vec<u8>, CliError> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::io::stdin()
        .read_to_end(&mut buf)
        .map_err(|e| CliError::failed(format!("reading standard input: {e}")))?;
    Ok(buf)
}

/// `MSG`, or all of standard input for `-` (and for no MSG when standard
/// input is not a terminal).
fn message_or_stdin(msg: Option<&str>) -> Result<Vec<u8>, CliError> {
    use std::io::IsTerminal;
    match msg {
        Some("-") => read_stdin(),
        Some(text) => Ok(text.as_bytes().to_vec()),
        None if !std::io::stdin().is_terminal() => read_stdin(),
        None => Err(CliError::usage(
            "give the message, or - to read standard input",
        )),
    }
}

/// Parses repeated `--header k=v`.
fn parse_headers(pairs: &[String]) -> Result<wharf::protocol::frame::Headers, CliError> {
    let mut headers = wharf::protocol::frame::Headers::new();
    for pair in pairs {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                headers.insert(k.to_owned(), v.to_owned());
            }
            _ => {
                return Err(CliError::usage(format!(
                    "--header {pair:?}: expected NAME=VALUE"
                )));
            }
        }
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(url: &str) -> Conn {
        Conn {
            url: url.into(),
            token: None,
            ca: None,
        }
    }

    #[test]
    fn urls() {
        assert_eq!(
            conn("http://h:1/").ws_url().ok(),
            Some("ws://h:1/ws".into())
        );
        assert_eq!(
            conn("https://h/p").ws_url().ok(),
            Some("wss://h/p/ws".into())
        );
        assert_eq!(conn("ws://h:1/ws").base().ok(), Some("http://h:1".into()));
        assert!(conn("h:1").base().is_err());
        assert!(conn("ftp://h").base().is_err());
    }

    #[test]
    fn headers_and_seconds() {
        let h = parse_headers(&["a=b=c".into()]).ok();
        assert_eq!(h.and_then(|h| h.get("a").cloned()), Some("b=c".into()));
        assert!(parse_headers(&["nope".into()]).is_err());
        assert_eq!(seconds("1.5"), Ok(Duration::from_millis(1500)));
        assert!(seconds("-1").is_err());
    }
}
