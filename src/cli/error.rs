//! How a client command fails: a message for stderr and an exit status
//! (1 for a refused or failed operation, 2 for bad usage, as clap).

use std::process::ExitCode;
use std::time::Duration;

use wharf::client::ClientError;

/// A failed client command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliError {
    /// The exit status.
    pub status: u8,
    /// What `wharf: ` is followed by on stderr; empty for nothing.
    pub text: String,
}

impl CliError {
    /// The broker refused: `code: message`, exit 1.
    pub fn refused(code: &str, message: &str) -> CliError {
        CliError {
            status: 1,
            text: format!("{code}: {message}"),
        }
    }

    /// Bad usage, exit 2.
    pub fn usage(text: impl Into<String>) -> CliError {
        CliError {
            status: 2,
            text: text.into(),
        }
    }

    /// Anything else that failed, exit 1.
    pub fn failed(text: impl Into<String>) -> CliError {
        CliError {
            status: 1,
            text: text.into(),
        }
    }

    /// A WebSocket client error, naming `url`; a refusal for want of
    /// credentials says how to give them when none were.
    pub fn client(e: ClientError, url: &str, token: bool) -> CliError {
        match e {
            ClientError::Connect(why) => {
                CliError::failed(format!("cannot connect to {url}: {why}"))
            }
            ClientError::Server { code, message } => {
                let mut err = CliError::refused(code.as_str(), &message);
                if code == wharf::protocol::frame::ErrorCode::Unauthorized && !token {
                    err.text.push_str(" (give --token or set WHARF_TOKEN)");
                }
                err
            }
            ClientError::Timeout(t) => CliError::timeout(url, t),
            ClientError::Closed => CliError::failed(format!("{url} closed the connection")),
            ClientError::Unexpected(what) => {
                CliError::failed(format!("{url} answered unexpectedly: {what}"))
            }
        }
    }

    /// No answer from `url` within `t`.
    pub fn timeout(url: &str, t: Duration) -> CliError {
        CliError::failed(format!("no answer from {url} within {}", secs(t)))
    }

    /// Prints the message (if any) and returns the exit status.
    pub fn report(&self) -> ExitCode {
        if !self.text.is_empty() {
            eprintln!("wharf: {}", self.text);
        }
        ExitCode::from(self.status)
    }
}

/// `2.5 s`.
pub fn secs(t: Duration) -> String {
    format!("{} s", t.as_secs_f64())
}
