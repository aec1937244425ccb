//! The retained bucket: a JetStream stream holding one message per
//! subject (`$KV.{bucket}.{key}`), laid out as NATS key-value buckets are,
//! so `nats kv` tools read it. Spoken through JetStream's JSON API over
//! plain requests rather than the client's typed JetStream API, whose
//! replies do not parse from every server version (2.9's among them).

use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use serde_json::json;

use super::js::api;
use super::{NatsError, Shared, Synced, subject, wire};

/// Most entries one filter's read takes.
pub const MAX_SYNC: u64 = 100_000;

/// The bucket's stream name, for a bucket name.
fn stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}

/// Finds the bucket's stream, or creates it: one message per key, on
/// disk, direct gets allowed (as `nats kv add` makes them).
///
/// # Errors
/// No JetStream on the server, or a refusal.
pub async fn ensure(client: &async_nats::Client, bucket: &str) -> Result<(), NatsError> {
    let name = stream(bucket);
    if api(client, format!("$JS.API.STREAM.INFO.{name}"), json!({}))
        .await
        .is_ok()
    {
        return Ok(());
    }
    api(
        client,
        format!("$JS.API.STREAM.CREATE.{name}"),
        json!({
            "name": name,
            "subjects": [format!("$KV.{bucket}.>")],
            "retention": "limits",
            "max_consumers": -1,
            "max_msgs": -1,
            "max_bytes": -1,
            "max_age": 0,
            "max_msgs_per_subject": 1,
            "max_msg_size": -1,
            "storage": "file",
            "discard": "new",
            "num_replicas": 1,
            "duplicate_window": 120_000_000_000u64,
            "allow_rollup_hdrs": true,
            "deny_delete": true,
            "allow_direct": true,
        }),
    )
    .await
    .map(|_| ())
}

/// The last value of every key matching each pattern: an ephemeral push
/// consumer per pattern, delivering the last message per subject to an
/// inbox, read up to the count it reports pending (at most [`MAX_SYNC`]),
/// each message within `wait`.
///
/// # Errors
/// A refusal or a reply that does not come.
pub async fn read(
    client: &async_nats::Client,
    bucket: &str,
    patterns: &[String],
    wait: Duration,
) -> Result<Synced, NatsError> {
    let name = stream(bucket);
    let prefix = format!("$KV.{bucket}.");
    let mut out = Vec::new();
    for p in patterns {
        let inbox = client.new_inbox();
        let mut sub = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| NatsError::Request(e.to_string()))?;
        let created = api(
            client,
            format!("$JS.API.CONSUMER.CREATE.{name}"),
            json!({
                "stream_name": name,
                "config": {
                    "deliver_subject": inbox,
                    "deliver_policy": "last_per_subject",
                    "ack_policy": "none",
                    "filter_subject": format!("{prefix}{p}"),
                    "replay_policy": "instant",
                    "inactive_threshold": 10_000_000_000u64,
                    "mem_storage": true,
                    "num_replicas": 1,
                }
            }),
        )
        .await?;
        let pending = created["num_pending"].as_u64().unwrap_or(0);
        if pending > MAX_SYNC {
            tracing::warn!(pattern = %p, pending, "cluster: reading only the first {MAX_SYNC} retained messages");
        }
        for _ in 0..pending.min(MAX_SYNC) {
            let Ok(Some(m)) = tokio::time::timeout(wait, sub.next()).await else {
                return Err(NatsError::Stopped("the retained bucket"));
            };
            let Some(key) = m.subject.as_str().strip_prefix(&prefix) else {
                continue;
            };
            let Ok(topic) = subject::key_topic(key) else {
                continue;
            };
            let cleared = m
                .headers
                .as_ref()
                .and_then(|h| h.get("KV-Operation"))
                .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
            let value = if cleared {
                None
            } else {
                match wire::retained_decode(&m.payload) {
                    Some(v) => Some(v),
                    None => continue,
                }
            };
            out.push((topic, value));
        }
        if let Some(consumer) = created["name"].as_str() {
            // Done with it; the server would drop it idle anyway.
            let _ = client
                .publish(
                    format!("$JS.API.CONSUMER.DELETE.{name}.{consumer}"),
                    bytes::Bytes::new(),
                )
                .await;
        }
    }
    Ok(out)
}

/// The retained bucket's name: the prefix's tokens joined by `_`.
pub(super) fn retained_bucket(prefix: &str) -> String {
    format!("{}_retained", prefix.replace('.', "_"))
}

/// What [`ensure_bucket`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bucket {
    /// The bucket exists: retained messages are written to it.
    Ready,
    /// NATS said no (no JetStream, most likely): asking again on its own
    /// would only repeat the warning.
    Refused,
    /// No answer in time: worth asking again.
    Unanswered,
}

/// Whether the retained bucket is known, asking NATS for it first if it
/// is not and the link is up.
pub(super) async fn has_bucket(client: &async_nats::Client, bucket: &str, shared: &Shared) -> bool {
    shared.retained.get().is_some()
        || (super::connected(client)
            && ensure_bucket(client, bucket, shared).await == Bucket::Ready)
}

/// Asks for the retained bucket again, on the link's tick, while it is
/// not known: until then retained messages published on this node stay
/// on it. Each ask runs in a task of its own (it may wait up to
/// `connect_timeout_ms` for JetStream), so the link's loop never waits on
/// it; one ask at a time, and none once NATS has said no (no JetStream).
#[derive(Default)]
pub(super) struct AskAgain {
    asking: Option<tokio::task::JoinHandle<Bucket>>,
    refused: bool,
}

impl AskAgain {
    /// Starts an ask unless one runs, the bucket is known, or NATS said no.
    pub(super) fn tick(&mut self, client: &async_nats::Client, bucket: &str, shared: &Arc<Shared>) {
        if let Some(asking) = &self.asking {
            if !asking.is_finished() {
                return;
            }
            if let Some(Ok(found)) = self.asking.take().and_then(FutureExt::now_or_never) {
                self.refused = found == Bucket::Refused;
            }
        }
        if self.refused || shared.retained.get().is_some() {
            return;
        }
        let (client, bucket, shared) = (client.clone(), bucket.to_owned(), shared.clone());
        self.asking = Some(tokio::spawn(async move {
            ensure_bucket(&client, &bucket, &shared).await
        }));
    }
}

impl Drop for AskAgain {
    fn drop(&mut self) {
        if let Some(asking) = &self.asking {
            asking.abort();
        }
    }
}

/// Finds or creates the retained bucket and from then on writes retained
/// messages to it. Without JetStream on the NATS server, retained
/// messages stay with each node (said each time it is tried).
pub(super) async fn ensure_bucket(
    client: &async_nats::Client,
    bucket: &str,
    shared: &Shared,
) -> Bucket {
    if shared.retained.get().is_some() {
        return Bucket::Ready;
    }
    match tokio::time::timeout(shared.confirm, ensure(client, bucket)).await {
        Ok(Ok(())) => {
            let _ = shared.retained.set(format!("$KV.{bucket}."));
            Bucket::Ready
        }
        Ok(Err(NatsError::Timeout)) | Err(_) => Bucket::Unanswered,
        Ok(Err(e)) => {
            tracing::warn!(
                bucket,
                "cluster: no retained bucket ({e}); retained messages stay with each node \
                 until NATS has JetStream (nats-server -js)"
            );
            Bucket::Refused
        }
    }
}
