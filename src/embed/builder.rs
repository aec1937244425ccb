//! [`WharfBuilder`]: the embedded broker's settings in code, starting
//! from a config (or the defaults) and changing what the app cares about.

use std::path::PathBuf;

use super::Error;
use super::Wharf;
use crate::config::{Config, FlushMode, QueueDecl};

/// Builds a [`Wharf`] from settings in code, for apps that do not keep a
/// config file. Everything not set keeps the config's value (the defaults
/// unless [`WharfBuilder::config`] was given).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), wharf::Error> {
/// use wharf::Wharf;
/// use wharf::config::FlushMode;
///
/// let wharf = Wharf::builder()
///     .data_dir("state")
///     .flush(FlushMode::Always)
///     .workers(2)
///     .start()
///     .await?;
/// wharf.publish("boot", "ready").await?;
/// wharf.shutdown().await
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct WharfBuilder {
    config: Config,
}

impl WharfBuilder {
    /// Starts from `config` instead of the defaults.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Where the store keeps its files.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.config.store.data_dir = dir.into();
        self
    }

    /// When writes become durable (`Always`: before they are confirmed).
    pub fn flush(mut self, mode: FlushMode) -> Self {
        self.config.store.flush = mode;
        self
    }

    /// Declares a queue (as a `[[queues]]` entry would).
    pub fn queue(mut self, decl: QueueDecl) -> Self {
        self.config.queues.push(decl);
        self
    }

    /// Task-queue worker threads (0 = one per core).
    pub fn workers(mut self, n: usize) -> Self {
        self.config.scheduler.workers = n;
        self
    }

    /// Validates the config and starts the broker (see [`Wharf::start`]).
    ///
    /// # Errors
    /// As [`Wharf::start`].
    pub async fn start(self) -> Result<Wharf, Error> {
        Wharf::start(self.config).await
    }
}

impl Wharf {
    /// A builder starting from the default config.
    pub fn builder() -> WharfBuilder {
        WharfBuilder::default()
    }
}
