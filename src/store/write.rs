//! The vocabulary shared by the writer thread and the engine: a [`Write`]
//! to one tree, a read's [`ReadResult`] and the [`CommitError`] both
//! report. It sits below `writer.rs` and `engine.rs`, so each imports it
//! and neither imports the other's types.

/// One change to one tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Insert or replace `key` in `tree`.
    Put {
        /// The tree (record kind).
        tree: &'static str,
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// Remove `key` from `tree`.
    Delete {
        /// The tree.
        tree: &'static str,
        /// The key.
        key: Vec<u8>,
    },
    /// Remove every key from `from` to `to` (both included) in `tree`.
    DeleteRange {
        /// The tree.
        tree: &'static str,
        /// First key.
        from: Vec<u8>,
        /// Last key.
        to: Vec<u8>,
    },
}

/// Key-value pairs read back by [`WriterHandle::read`](super::WriterHandle::read).
pub type ReadResult = Result<Vec<(Vec<u8>, Vec<u8>)>, CommitError>;

/// Why a commit failed (shared by every write of the group).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store commit failed: {0}")]
pub struct CommitError(pub String);
