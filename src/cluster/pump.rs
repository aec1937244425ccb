//! The link's publish pump: what the broker hands over for NATS, sent in
//! order, held while NATS is away.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::{mpsc, oneshot};

use super::{Outbound, Shared};

/// Sends forwarded publishes to NATS in the order they were handed over,
/// until `finish`: then the buffer closes and what is in it is still
/// sent.
pub(super) async fn pump(
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Outbound>,
    mut finish: oneshot::Receiver<()>,
) {
    let c = &shared.counters;
    let mut online = shared.online.clone();
    let mut finished = false;
    loop {
        let m = tokio::select! {
            biased;
            m = rx.recv() => m,
            _ = &mut finish, if !finished => {
                finished = true;
                rx.close();
                rx.recv().await
            }
        };
        let Some(m) = m else {
            break;
        };
        // NATS away: hold this message (and the buffer behind it) until it
        // is back and the other nodes listen again.
        if !finished && !super::connected(&shared.client) {
            super::peers::hold_until_heard(&shared, &mut online).await;
        }
        let client = &shared.client;
        let sent = match (m.headers, m.reply) {
            (Some(h), None) => client.publish_with_headers(m.subject, h, m.payload).await,
            (None, None) => client.publish(m.subject, m.payload).await,
            (Some(h), Some(r)) => {
                client
                    .publish_with_reply_and_headers(m.subject, r, h, m.payload)
                    .await
            }
            (None, Some(r)) => client.publish_with_reply(m.subject, r, m.payload).await,
        };
        match sent {
            Ok(()) => c.forwarded.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                tracing::debug!("cluster: NATS refused a publish: {e}");
                c.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}
