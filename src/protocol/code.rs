//! [`ErrorCode`]: the error codes every transport shares (native error
//! frames, HTTP bodies, MQTT reason strings, the cluster's answers).

use serde::{Deserialize, Serialize};

/// Error codes of the `error` frame. Stable: clients match on them.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    bincode::Encode,
    bincode::Decode,
)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON / not bincode, or truncated.
    Malformed,
    /// `op` names no operation.
    UnknownOp,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong type or an invalid value, or is unknown.
    InvalidField,
    /// A topic name is invalid (empty, wildcard, NUL, too long).
    InvalidTopic,
    /// A topic filter is invalid.
    InvalidFilter,
    /// The payload is larger than `max_payload`.
    PayloadTooLarge,
    /// The session sends faster than `rate_per_s`; persisting closes it.
    RateLimited,
    /// `hello` came after other frames, or twice.
    UnexpectedHello,
    /// The protocol version is not spoken here.
    UnsupportedVersion,
    /// The subscription id is already in use in this session.
    DuplicateSubscription,
    /// No subscription has this id in this session.
    UnknownSubscription,
    /// The session has too many subscriptions.
    TooManySubscriptions,
    /// The broker is too busy for this request right now.
    Overloaded,
    /// A server-side failure.
    Internal,
    /// The broker holds `topics.max_topics` topics and will not create one
    /// more.
    TooManyTopics,
    /// The queue holds its `max_length` messages.
    QueueFull,
    /// A delivery id is not in flight to this consumer.
    UnknownDelivery,
    /// No queue has this name.
    UnknownQueue,
    /// No job has this id.
    UnknownJob,
    /// The worker is not (or no longer) registered: register again.
    WorkerExpired,
    /// The token is not the job's current attempt by this worker.
    StaleToken,
    /// `jobs.max_workers` workers are registered.
    TooManyWorkers,
    /// `begin` inside a transaction, or `commit` / `rollback` outside one.
    TransactionState,
    /// The transaction holds `session.max_transaction_ops` operations.
    TransactionTooLarge,
    /// Credentials are missing, wrong or expired.
    Unauthorized,
    /// The principal may not do this.
    Forbidden,
    /// Too many failed authentications from this address; wait.
    TooManyFailures,
    /// The target is not in a state that allows this (a message in
    /// flight cannot move, a finished job cannot be cancelled).
    Conflict,
    /// No message with this id in the queue.
    UnknownMessage,
    /// The request reached another node, which did not answer in time:
    /// it may or may not have been carried out (retrying an enqueue may
    /// store it twice).
    OutcomeUnknown,
}

impl ErrorCode {
    /// The snake_case name used on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Malformed => "malformed",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::MissingField => "missing_field",
            ErrorCode::InvalidField => "invalid_field",
            ErrorCode::InvalidTopic => "invalid_topic",
            ErrorCode::InvalidFilter => "invalid_filter",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::UnexpectedHello => "unexpected_hello",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::DuplicateSubscription => "duplicate_subscription",
            ErrorCode::UnknownSubscription => "unknown_subscription",
            ErrorCode::TooManySubscriptions => "too_many_subscriptions",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::Internal => "internal",
            ErrorCode::TooManyTopics => "too_many_topics",
            ErrorCode::QueueFull => "queue_full",
            ErrorCode::UnknownDelivery => "unknown_delivery",
            ErrorCode::UnknownQueue => "unknown_queue",
            ErrorCode::UnknownJob => "unknown_job",
            ErrorCode::WorkerExpired => "worker_expired",
            ErrorCode::StaleToken => "stale_token",
            ErrorCode::TooManyWorkers => "too_many_workers",
            ErrorCode::TransactionState => "transaction_state",
            ErrorCode::TransactionTooLarge => "transaction_too_large",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::TooManyFailures => "too_many_failures",
            ErrorCode::Conflict => "conflict",
            ErrorCode::UnknownMessage => "unknown_message",
            ErrorCode::OutcomeUnknown => "outcome_unknown",
        }
    }
}
