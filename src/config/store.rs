//! `[store]`: where and how the store keeps what must survive a restart.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// When the store makes writes durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlushMode {
    /// Flush and fsync every group commit before confirming its writes:
    /// what was confirmed survives a crash.
    #[default]
    Always,
    /// Confirm writes once applied; flush every `interval_ms`. A crash can
    /// lose up to one interval of confirmed writes.
    Interval,
}

/// `[store]` settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Directory of the sled database; created if missing.
    pub data_dir: PathBuf,
    /// sled page cache in MiB. sled's real memory use can be several times
    /// this, so it is set explicitly.
    pub cache_capacity_mb: u64,
    /// `always` or `interval`.
    pub flush: FlushMode,
    /// Milliseconds between flushes with `flush = "interval"`.
    pub interval_ms: u64,
    /// Compact the store at start when its files are at least four times
    /// the size of its live records and 8 MiB more (sled gives the space
    /// of deleted records back only so; `store/compact.rs`).
    pub compact_at_start: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            data_dir: PathBuf::from("wharf-data"),
            cache_capacity_mb: 64,
            flush: FlushMode::Always,
            interval_ms: 100,
            compact_at_start: true,
        }
    }
}
