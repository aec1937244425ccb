//! [`BrokerError`]: why a broker operation failed, with the error code it
//! has on every transport.

use crate::protocol::frame::ErrorCode;
use crate::routing::TopicError;
use crate::store::SubmitError;
use crate::taskq::TaskError;

/// Why a broker operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The topic name is not valid.
    #[error("invalid topic: {0}")]
    InvalidTopic(TopicError),
    /// The filter is not valid.
    #[error("invalid filter: {0}")]
    InvalidFilter(TopicError),
    /// The topic's task queue refused or lost the task.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// The store failed the write (its commit error kept as the source).
    #[error(transparent)]
    Store(#[from] crate::store::CommitError),
    /// The store writer is too far behind to take the write; try again.
    #[error(transparent)]
    StoreBusy(SubmitError),
    /// Only the broker publishes there (presence events).
    #[error("only the broker publishes to {0:?} (presence events)")]
    ReservedTopic(String),
    /// Creating the topic would pass `topics.max_topics`.
    #[error("too many topics: at most {0}")]
    TooManyTopics(usize),
    /// The topic was removed and re-created under the operation more times
    /// than it retries; try again.
    #[error("topic is being removed and re-created; try again")]
    Contended,
    /// The queue holds `max_length` messages.
    #[error("queue full: it holds its maximum of {0} messages")]
    QueueFull(u64),
    /// The queue is draining before its removal (`DELETE
    /// /queues/{name}?drain=true`): it takes no more messages.
    #[error("the queue is draining before its removal: it takes no more messages")]
    QueueDraining,
    /// These delivery ids are not in flight to this consumer (already
    /// settled, timed out, or never delivered to it).
    #[error("unknown delivery ids {0:?}: not in flight to this consumer")]
    UnknownDelivery(Vec<u64>),
    /// The consumer id is already consuming this queue.
    #[error("this consumer id is already consuming the queue")]
    DuplicateConsumer,
    /// No consumer with this id on this queue.
    #[error("no such consumer on the queue")]
    UnknownConsumer,
    /// No queue has this name.
    #[error("no queue named {0:?}")]
    UnknownQueue(String),
    /// Priorities are 0 to 9.
    #[error("priority {0} is out of range 0-9")]
    InvalidPriority(u8),
    /// Prefetch must be 1 to [`MAX_PREFETCH`](super::MAX_PREFETCH).
    #[error("prefetch {0} is out of range 1-10000")]
    InvalidPrefetch(u32),
    /// An ack, nack, reject or touch names 1 to [`MAX_IDS`](super::MAX_IDS) deliveries.
    #[error("{0} delivery ids: give 1 to 10000")]
    InvalidIds(usize),
    /// A durable subscription cannot be named from this client id and
    /// subscription id.
    #[error("durable subscription: {0}")]
    InvalidDurable(String),
    /// The message is delivered and not yet settled: it cannot move.
    #[error("message {0} is in flight to a consumer; it can move once it is settled or returned")]
    MessageInFlight(u64),
    /// No message with this id in the queue.
    #[error("no message {0} in the queue")]
    UnknownMessage(u64),
    /// A request that makes no sense as asked (a move to the queue itself).
    #[error("{0}")]
    Invalid(String),
    /// The queue's home node refused the call (with the code it gave).
    #[error("{message}")]
    Remote {
        /// The home's error code.
        code: ErrorCode,
        /// The home's reason.
        message: String,
    },
    /// The call did not reach the queue's home node (down, or NATS
    /// away): nothing was done there; try again.
    #[error("the queue's home node {home:?} did not answer: {reason}")]
    HomeUnreachable {
        /// The home.
        home: String,
        /// What the NATS client said.
        reason: String,
    },
    /// The call was sent to the queue's home node, which did not answer
    /// in time: it may have been carried out (an enqueue sent again is
    /// stored once only if it carries the same `msg-id`).
    #[error(
        "the queue's home node {home:?} did not answer ({why}): the request may or may not \
         have been carried out there (an enqueue sent again with the same msg-id header is \
         stored once)"
    )]
    HomeSilent {
        /// The home.
        home: String,
        /// Why no answer came (how long it waited, or that the home went).
        why: String,
    },
}

impl BrokerError {
    /// The error code this error has on every transport (native `error`
    /// frames; HTTP derives its status from it).
    pub fn code(&self) -> ErrorCode {
        match self {
            BrokerError::InvalidTopic(_) => ErrorCode::InvalidTopic,
            BrokerError::InvalidFilter(_) => ErrorCode::InvalidFilter,
            BrokerError::Task(TaskError::Overloaded { .. })
            | BrokerError::Contended
            | BrokerError::StoreBusy(_) => ErrorCode::Overloaded,
            BrokerError::TooManyTopics(_) => ErrorCode::TooManyTopics,
            BrokerError::ReservedTopic(_) => ErrorCode::Forbidden,
            BrokerError::Task(_) | BrokerError::Store(_) => ErrorCode::Internal,
            BrokerError::QueueFull(_) => ErrorCode::QueueFull,
            BrokerError::QueueDraining => ErrorCode::Conflict,
            BrokerError::UnknownDelivery(_) => ErrorCode::UnknownDelivery,
            BrokerError::DuplicateConsumer => ErrorCode::DuplicateSubscription,
            BrokerError::UnknownConsumer => ErrorCode::UnknownSubscription,
            BrokerError::UnknownQueue(_) => ErrorCode::UnknownQueue,
            BrokerError::InvalidPriority(_)
            | BrokerError::InvalidPrefetch(_)
            | BrokerError::InvalidIds(_)
            | BrokerError::InvalidDurable(_)
            | BrokerError::Invalid(_) => ErrorCode::InvalidField,
            BrokerError::MessageInFlight(_) => ErrorCode::Conflict,
            BrokerError::UnknownMessage(_) => ErrorCode::UnknownMessage,
            BrokerError::Remote { code, .. } => *code,
            BrokerError::HomeUnreachable { .. } => ErrorCode::Overloaded,
            BrokerError::HomeSilent { .. } => ErrorCode::OutcomeUnknown,
        }
    }
}
