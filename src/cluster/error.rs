//! The cluster's errors, typed: why a node could not join
//! ([`ClusterError`]), why a call to another node got no answer
//! ([`CallError`]), why a request to NATS or JetStream failed
//! ([`NatsError`]), why a framed message does not read ([`FrameError`]).

/// Why a node could not join its cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// NATS did not answer within `connect_timeout_ms` (and
    /// `cluster.required` is set).
    #[error(
        "cluster.nats: cannot reach NATS at {urls}: {reason} (set cluster.required = false to start without it)"
    )]
    Unreachable {
        /// The servers tried.
        urls: String,
        /// What the client said.
        reason: String,
    },
    /// A credentials or TLS file could not be read.
    #[error("cluster.{key}: {reason}")]
    Setup {
        /// The key at fault.
        key: &'static str,
        /// Why.
        reason: String,
    },
    /// The link's thread could not start.
    #[error("cluster: cannot start the NATS link thread: {0}")]
    Thread(#[from] std::io::Error),
    /// Another running node answers to this node's name.
    #[error(
        "cluster.node: another running node is named {0:?} (it answered on NATS); \
         give each node its own name"
    )]
    NameTaken(String),
}

/// Why a call to another node got no answer (the broker reports it as
/// `BrokerError::HomeUnreachable`, naming the home).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Too many calls wait for answers already.
    #[error("{0} calls are waiting for answers already")]
    TooManyWaiting(usize),
    /// The link's publish buffer is full.
    #[error("the link's buffer is full (NATS slow or away)")]
    BufferFull,
    /// The call was failed after it was sent: its home stopped or was
    /// lost, or this node's link stopped.
    #[error("the home went, or the link stopped, while the call waited")]
    LinkStopped,
    /// No answer in time.
    #[error("no answer within {0} ms")]
    Timeout(u128),
    /// Nobody serves the home's subject.
    #[error("no responders (the node is down, or not yet up)")]
    NoResponders,
    /// The answer is not one.
    #[error("an unreadable answer: {0}")]
    Unreadable(String),
}

/// Why a request to NATS or JetStream failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NatsError {
    /// The request did not get through, or got no reply.
    #[error("{0}")]
    Request(String),
    /// JetStream refused it.
    #[error("{description} ({code})")]
    Refused {
        /// What JetStream said.
        description: String,
        /// Its `err_code`.
        code: String,
    },
    /// The reply is not JSON.
    #[error("an unreadable reply: {0}")]
    Unreadable(String),
    /// A stream of replies stopped before its end.
    #[error("{0} stopped sending")]
    Stopped(&'static str),
    /// No reply in time.
    #[error("timed out")]
    Timeout,
    /// The link's state lost what the request was about.
    #[error("cluster state lost a filter")]
    LostFilter,
    /// The filter was released while its retained messages were read.
    #[error("filter released")]
    Released,
}

/// Why a framed message (a JSON head and a payload) does not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Shorter than its 4-byte length.
    #[error("shorter than its length")]
    Short,
    /// The head's length does not fit the message or the bound.
    #[error("head of {0} bytes does not fit")]
    Oversized(usize),
    /// The head is not the JSON expected.
    #[error("{0}")]
    Head(String),
}
