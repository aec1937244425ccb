//! [`Error`]: why an embedded broker (or the server around it) could not
//! start, or stopped with an error.

/// Why the broker could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration was refused.
    #[error("invalid configuration: {0}")]
    Config(#[from] crate::config::ConfigError),
    /// The store could not be opened or synced.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The broker could not restore what the store holds.
    #[error(transparent)]
    Broker(#[from] crate::broker::BrokerError),
    /// The task queue workers could not start.
    #[error(transparent)]
    Scheduler(#[from] crate::taskq::SchedulerError),
    /// The node could not join its cluster (`[cluster]`).
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// The stored jobs could not be restored.
    #[error("restoring jobs: {0}")]
    Jobs(#[from] crate::broker::jobs::JobError),
    /// Work handed to actix's blocking thread pool (opening the store,
    /// stopping the workers) was lost: the pool is shutting down.
    #[error("blocking work was lost: {0}")]
    Blocking(#[from] actix_web::error::BlockingError),
    /// The embedded job workers' thread is not running.
    #[error("the job worker thread is not running")]
    WorkerThread,
    /// The stop (workers, store writer, sync) did not finish in time; it
    /// carries on in the background, and the next start reports an
    /// unclean shutdown if it never ends.
    #[error("the broker's stop did not finish within {limit:?}; stuck at: {step}")]
    ShutdownStuck {
        /// The step the stop had reached.
        step: &'static str,
        /// How long the stop was given.
        limit: std::time::Duration,
    },
    /// A listener could not be bound.
    #[error("cannot bind {key} = {addr}: {source}")]
    Bind {
        /// The configuration key naming the address.
        key: &'static str,
        /// The address.
        addr: std::net::SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Binding, accepting or serving failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
}
