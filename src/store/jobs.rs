//! Job records on disk: tree `jobs`, key = job id (16 bytes, a UUID v7, so
//! keys sort by creation time), value = the record as the broker encodes
//! it (JSON). Written on every status change; deleted when a finished
//! job's retention ends.

use super::engine::Engine as _;
use super::write::Write;
use super::{Store, StoreError, read_error};

/// The tree of job records.
pub const JOBS_TREE: &str = "jobs";

/// A stored job: its id and its record.
pub type StoredJob = ([u8; 16], Vec<u8>);

/// The write that stores a job record.
pub fn put(id: &[u8; 16], record: Vec<u8>) -> Write {
    Write::Put {
        tree: JOBS_TREE,
        key: id.to_vec(),
        value: record,
    }
}

/// The write that deletes a job record.
pub fn delete(id: &[u8; 16]) -> Write {
    Write::Delete {
        tree: JOBS_TREE,
        key: id.to_vec(),
    }
}

/// The write that deletes every job record (a node installing the jobs
/// another node held: `[cluster] failover`).
pub fn delete_all() -> Write {
    let (from, to) = all();
    Write::DeleteRange {
        tree: JOBS_TREE,
        from,
        to,
    }
}

/// The whole key range of the tree (for a range read or delete).
pub fn all() -> (Vec<u8>, Vec<u8>) {
    (vec![0; 16], vec![0xff; 16])
}

impl Store {
    /// Every stored job record, oldest id first.
    ///
    /// # Errors
    /// [`StoreError::Read`] if the tree cannot be read.
    pub fn load_jobs(&self) -> Result<Vec<StoredJob>, StoreError> {
        let mut out = Vec::new();
        self.engine()?
            .scan(JOBS_TREE, &mut |k, v| {
                match <[u8; 16]>::try_from(k) {
                    Ok(id) => out.push((id, v.to_vec())),
                    Err(_) => tracing::warn!(key = ?k, "skipping a job record with a bad key"),
                }
                true
            })
            .map_err(read_error("read jobs"))?;
        Ok(out)
    }

    /// How many records [`Store::load_jobs`] would return, without
    /// keeping them (for the count of a clean shutdown).
    ///
    /// # Errors
    /// [`StoreError::Read`] if the tree cannot be read.
    pub(super) fn count_jobs(&self) -> Result<u64, StoreError> {
        let mut n = 0;
        self.engine()?
            .scan(JOBS_TREE, &mut |k, _| {
                n += u64::from(k.len() == 16);
                true
            })
            .map_err(read_error("count jobs"))?;
        Ok(n)
    }
}
