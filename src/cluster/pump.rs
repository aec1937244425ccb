//! The link's publish pump: what the broker hands over for NATS, sent in
//! order, held while NATS is away, and what was in flight when NATS was
//! lost sent again once it is back (`resend.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use async_nats::Subject;
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use super::resend::Sent;
use super::{Outbound, Shared, What, wire};

/// A publish kept to send again: a topic publish (numbered) or a
/// retained bucket write.
enum Again {
    Topic {
        /// The subject then the payload, copied into the pump's arena.
        both: Bytes,
        subject_len: usize,
        headers: crate::protocol::frame::Headers,
        flags: wire::Flags,
        seq: u64,
    },
    Retained {
        subject: Subject,
        payload: Bytes,
        headers: Option<async_nats::HeaderMap>,
    },
}

/// Most publishes taken from the buffer at once.
const BATCH: usize = 64;

/// The pump's state besides the buffer.
struct Pump {
    shared: Arc<Shared>,
    sent: Sent<Again>,
    /// `{epoch:x}.` of this process, as `Wharf-Seq` starts.
    epoch: String,
    /// The client's connects when the pump last sent: a change is a
    /// reconnect.
    connects: u64,
    /// When the pump saw NATS go, since it last sent.
    lost: Option<Instant>,
    /// Where the subjects and payloads kept are copied: one allocation
    /// per [`ARENA`] bytes rather than per publish, and the publisher's
    /// read buffer is not pinned by a payload kept.
    arena: bytes::BytesMut,
}

/// The size of an arena chunk.
const ARENA: usize = 256 * 1024;

/// Sends forwarded publishes to NATS in the order they were handed over,
/// until `finish`: then the buffer closes and what is in it is still
/// sent.
pub(super) async fn pump(
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Outbound>,
    mut finish: oneshot::Receiver<()>,
) {
    let mut online = shared.online.clone();
    // Whether NATS is up, watched by a future kept across messages (made
    // again only when it fires: not once per message).
    let watched = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let changed = rx.changed().await.is_ok();
        let up = *rx.borrow_and_update();
        (changed, up, rx)
    };
    let mut change = Box::pin(watched(shared.online.clone()));
    let mut watching = true;
    let stats = shared.client.statistics();
    // The process's instance is a v7 UUID: its last 16 hex digits are
    // random.
    let epoch = shared
        .instance
        .get(shared.instance.len().saturating_sub(16)..)
        .and_then(|h| u64::from_str_radix(h, 16).ok())
        .unwrap_or_default();
    let mut p = Pump {
        shared: shared.clone(),
        sent: Sent::default(),
        epoch: wire::epoch_prefix(epoch),
        connects: stats.connects.load(Ordering::Relaxed),
        lost: None,
        arena: bytes::BytesMut::new(),
    };
    let mut finished = false;
    // Taken from the buffer a batch at a time: one wake-up for many.
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let n = tokio::select! {
            biased;
            // Ahead of the buffer: when NATS went is when what was in
            // flight was lost.
            (changed, up, rx) = &mut change, if !finished && watching => {
                if !changed {
                    // The client is gone: nothing more to watch.
                    watching = false;
                    continue;
                }
                change = Box::pin(watched(rx));
                if !up {
                    p.lost.get_or_insert_with(Instant::now);
                } else if p.reconnected(&stats) {
                    super::peers::until_listening(&shared, &shared.up(), p.connects).await;
                    p.send_again().await;
                }
                continue;
            }
            n = rx.recv_many(&mut batch, BATCH) => n,
            _ = &mut finish, if !finished => {
                finished = true;
                rx.close();
                rx.recv_many(&mut batch, BATCH).await
            }
        };
        if n == 0 {
            break;
        }
        for m in batch.drain(..) {
            // NATS away: hold this message (and the buffer behind it)
            // until it is back and the other nodes listen again.
            let mut held = false;
            if !finished && !super::connected(&shared.client) {
                p.lost.get_or_insert_with(Instant::now);
                super::peers::hold_until_heard(&shared, &mut online).await;
                held = true;
            }
            if p.reconnected(&stats) {
                if !held && !finished {
                    super::peers::until_listening(&shared, &shared.up(), p.connects).await;
                }
                p.send_again().await;
            }
            p.send(m).await;
        }
    }
}

/// Publishes `payload` on `subject`, with `headers` if any.
async fn publish(
    client: &async_nats::Client,
    subject: Subject,
    headers: Option<async_nats::HeaderMap>,
    payload: Bytes,
) -> Result<(), async_nats::PublishError> {
    match headers {
        Some(h) => client.publish_with_headers(subject, h, payload).await,
        None => client.publish(subject, payload).await,
    }
}

/// `subject` then `payload`, copied into `arena`.
fn stash(arena: &mut bytes::BytesMut, subject: &str, payload: &[u8]) -> Bytes {
    let need = subject.len() + payload.len();
    if arena.capacity() - arena.len() < need {
        *arena = bytes::BytesMut::with_capacity(ARENA.max(need));
    }
    arena.extend_from_slice(subject.as_bytes());
    arena.extend_from_slice(payload);
    arena.split().freeze()
}

impl Pump {
    /// Whether the client connected again since the pump last looked (a
    /// first connect is not a reconnect).
    fn reconnected(&mut self, stats: &async_nats::Statistics) -> bool {
        let now = stats.connects.load(Ordering::Relaxed);
        let was = std::mem::replace(&mut self.connects, now);
        now != was && was > 0
    }

    fn keep(&mut self, size: usize, again: Again) {
        let now = Instant::now();
        self.sent.keep(now, size, again);
        // NATS up since: what was sent before the last KEEP_FOR reached
        // it. (With NATS lost, what was in flight then is kept.)
        if self.lost.is_none() {
            self.sent.forget_before(now);
        }
    }

    async fn send(&mut self, m: Outbound) {
        let client = &self.shared.client;
        let Outbound {
            subject,
            payload,
            what,
        } = m;
        let sent = match what {
            What::Topic(mut map, headers, flags) => {
                let seq = self.sent.number();
                wire::number(&mut map, &self.epoch, seq, false);
                let subject_len = subject.len();
                let size = subject_len + payload.len();
                let both = stash(&mut self.arena, &subject, &payload);
                let r = client.publish_with_headers(subject, map, payload).await;
                let again = Again::Topic {
                    both,
                    subject_len,
                    headers,
                    flags,
                    seq,
                };
                self.keep(size, again);
                r
            }
            What::Retained(headers) => {
                let size = subject.len() + payload.len();
                let subject = Subject::from(subject);
                let r = publish(client, subject.clone(), headers.clone(), payload.clone()).await;
                let again = Again::Retained {
                    subject,
                    payload,
                    headers,
                };
                self.keep(size, again);
                r
            }
            What::Once { headers, reply } => match (headers, reply) {
                (h, None) => publish(client, subject.into(), h, payload).await,
                (Some(h), Some(r)) => {
                    client
                        .publish_with_reply_and_headers(subject, r, h, payload)
                        .await
                }
                (None, Some(r)) => client.publish_with_reply(subject, r, payload).await,
            },
        };
        let c = &self.shared.counters;
        match sent {
            Ok(()) => c.forwarded.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                tracing::debug!("cluster: NATS refused a publish: {e}");
                c.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }

    /// Sends again, in their order, the topic publishes and retained
    /// writes sent shortly before NATS was lost: a dying server may have
    /// taken them with it (receivers drop the copies they had).
    async fn send_again(&mut self) {
        let lost = self.lost.take().unwrap_or_else(Instant::now);
        let client = &self.shared.client;
        let mut n = 0u64;
        for k in self.sent.since(lost) {
            let r = match &k.item {
                Again::Topic {
                    both,
                    subject_len,
                    headers,
                    flags,
                    seq,
                } => {
                    let mut map = wire::encode(&self.shared.node, headers, *flags);
                    wire::number(&mut map, &self.epoch, *seq, true);
                    let Ok(subject) = Subject::from_utf8(both.slice(..*subject_len)) else {
                        continue;
                    };
                    client
                        .publish_with_headers(subject, map, both.slice(*subject_len..))
                        .await
                }
                Again::Retained {
                    subject,
                    payload,
                    headers,
                } => publish(client, subject.clone(), headers.clone(), payload.clone()).await,
            };
            if r.is_ok() {
                n += 1;
            }
        }
        self.shared.counters.resent.fetch_add(n, Ordering::Relaxed);
        if n > 0 {
            tracing::info!(
                resent = n,
                "cluster: NATS is back; what was sent just before it was lost is sent again"
            );
        }
    }
}
