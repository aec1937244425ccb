//! Taking a queue, or the jobs, over from its journal (`[cluster]
//! failover`, once this node holds the lease: `failover.rs`): read the
//! records back, fence the old home off with a takeover record, install
//! what the records leave in this node's store and memory, and start
//! appending. A journal never written starts from what this node's store
//! holds (failover just turned on).

use std::sync::Arc;

use super::Shared;
use super::home::JOBS_HOME_KEY;
use super::journal::Journal;
use super::js::PublishError;
use crate::broker::jobs::Jobs;
use crate::broker::{Broker, BrokerError};
use crate::protocol::frame::ErrorCode;
use crate::store::replica::JOBS_ID;

/// The jobs resource's name in the journal: a `$` name, which no queue
/// failover moves can have (those stay on the node that made them).
pub(super) const JOBS_JOURNAL: &str = "$jobs";

/// Why a takeover did not happen.
pub(super) fn claim_error(key: &str, why: impl std::fmt::Display) -> BrokerError {
    BrokerError::Remote {
        code: ErrorCode::Overloaded,
        message: if key == JOBS_HOME_KEY {
            format!("the jobs have no home right now: {why}")
        } else {
            format!("queue {key:?} has no home right now: {why}")
        },
    }
}

/// Reads queue `name`'s journal, fences it, installs what it holds and
/// starts appending to it.
pub(super) async fn take_over(
    shared: &Arc<Shared>,
    journal: &Journal,
    broker: &Broker,
    name: &str,
) -> Result<(), BrokerError> {
    let client = &shared.client;
    // Stopped here before (lease lost): its writes may pass again, the
    // install's first.
    journal.clear_stopped(name);
    for _ in 0..3 {
        let (rebuilt, last_read) = journal
            .read(client, name)
            .await
            .map_err(|e| claim_error(name, format!("reading its journal: {e}")))?;
        let last = match journal.fence(client, name, last_read).await {
            Ok(seq) => seq,
            // Its old home appended after the read: read again.
            Err(PublishError::Fenced) => continue,
            Err(PublishError::Other(e)) => {
                return Err(claim_error(name, format!("fencing its journal: {e}")));
            }
        };
        if last_read == 0 {
            // A journal never written: the queue is new, or had messages
            // here before failover was on. Nothing is made for a name no
            // one used (its queue is made here by its first write).
            match broker.queues().stored_writes(name).await? {
                None => journal.start(None, name, last, rebuilt),
                Some((id, writes)) if writes.is_empty() => {
                    journal.start(Some(id), name, last, rebuilt)
                }
                Some((id, writes)) => {
                    // They are the queue's: the journal starts from them
                    // (calls wait for this takeover, so nothing else
                    // writes to the queue meanwhile).
                    let (last, rebuilt) = journal
                        .seed(client, name, last, &writes)
                        .await
                        .map_err(|e| claim_error(name, format!("starting its journal: {e}")))?;
                    journal.start(Some(id), name, last, rebuilt);
                    tracing::info!(
                        queue = name,
                        records = writes.len(),
                        "cluster: the queue's journal starts from this node's store"
                    );
                }
            }
            return Ok(());
        }
        let messages = rebuilt.messages();
        let count = messages.len();
        let id = broker.queues().install_queue(name, messages).await?;
        journal.start(Some(id), name, last, rebuilt);
        tracing::info!(
            queue = name,
            messages = count,
            "cluster: queue rebuilt from its journal"
        );
        return Ok(());
    }
    Err(claim_error(
        name,
        "its old home keeps appending to its journal",
    ))
}

/// Reads the jobs resource's journal, fences it, installs the jobs it
/// holds (or, never journaled, those this node's store holds, which start
/// it) and starts appending to it.
pub(super) async fn take_over_jobs(
    shared: &Arc<Shared>,
    journal: &Journal,
    jobs: &Jobs,
) -> Result<(), BrokerError> {
    let (client, name) = (&shared.client, JOBS_JOURNAL);
    let failed =
        |what: &str, e: &dyn std::fmt::Display| claim_error(JOBS_HOME_KEY, format!("{what}: {e}"));
    journal.clear_stopped(name);
    for _ in 0..3 {
        let (mut rebuilt, last_read) = journal
            .read(client, name)
            .await
            .map_err(|e| failed("reading the jobs' journal", &e))?;
        let mut last = match journal.fence(client, name, last_read).await {
            Ok(seq) => seq,
            Err(PublishError::Fenced) => continue,
            Err(PublishError::Other(e)) => return Err(failed("fencing the jobs' journal", &e)),
        };
        let records = if last_read == 0 {
            // Never journaled (failover just turned on): what this node's
            // store holds starts it.
            let stored = jobs
                .stored_records()
                .await
                .map_err(|e| failed("reading this node's job records", &e))?;
            if !stored.is_empty() {
                let writes: Vec<crate::store::Write> = stored
                    .iter()
                    .map(|(id, record)| crate::store::jobs::put(id, record.clone()))
                    .collect();
                (last, rebuilt) = journal
                    .seed(client, name, last, &writes)
                    .await
                    .map_err(|e| failed("starting the jobs' journal", &e))?;
            }
            stored
        } else {
            rebuilt.take_jobs()
        };
        let count = jobs
            .install(records)
            .await
            .map_err(|e| failed("installing the jobs", &e))?;
        journal.start(Some(JOBS_ID), name, last, rebuilt);
        tracing::info!(
            jobs = count,
            from_journal = last_read > 0,
            "cluster: this node serves the jobs now"
        );
        return Ok(());
    }
    Err(claim_error(
        JOBS_HOME_KEY,
        "its old home keeps appending to the jobs' journal",
    ))
}
