//! What the link says and hears of nodes' filters on NATS (what it means
//! is in [`super::interest`]): this node's changes and whole set, the
//! others' changes answered with acknowledgements, asks for a whole set,
//! and a starting node's roll call.

use std::time::Duration;

use super::Shared;
use super::interest::{Ack, Next, Roll, Said, Told};

/// `{prefix}.sys.interest`: every node's changes and whole sets.
pub(super) fn interest_subject(prefix: &str) -> String {
    format!("{prefix}.sys.interest")
}

/// `{prefix}.sys.ack.{node}`: acknowledgements of `node`'s changes.
pub(super) fn ack_subject(prefix: &str, node: &str) -> String {
    format!("{prefix}.sys.ack.{node}")
}

/// `{prefix}.sys.tell.{node}`: asks `node` for its whole set.
pub(super) fn tell_subject(prefix: &str, node: &str) -> String {
    format!("{prefix}.sys.tell.{node}")
}

/// `{prefix}.sys.roll`: a starting node asks who is up.
pub(super) fn roll_subject(prefix: &str) -> String {
    format!("{prefix}.sys.roll")
}

async fn send(shared: &Shared, said: Said) {
    let sent = shared
        .client
        .publish_with_reply(
            interest_subject(&shared.prefix),
            ack_subject(&shared.prefix, &shared.node),
            said.encode(),
        )
        .await;
    if let Err(e) = sent {
        tracing::debug!("cluster: this node's filters were not sent: {e}");
    }
}

/// Sends the changes to this node's filters noted in `told`, if any.
pub(super) async fn change(shared: &Shared, told: &mut Told) {
    if let Some(said) = told.change(&shared.node, &shared.instance) {
        send(shared, said).await;
    }
}

/// Sends this node's whole set of `filters` (its noted changes first).
pub(super) async fn whole<'a>(
    shared: &Shared,
    told: &mut Told,
    filters: impl Iterator<Item = &'a String>,
) {
    change(shared, told).await;
    for part in told.whole(&shared.node, &shared.instance, filters) {
        send(shared, part).await;
    }
}

/// Asks `node` for its whole set.
pub(super) async fn ask(shared: &Shared, node: &str) {
    let _ = shared
        .client
        .publish(tell_subject(&shared.prefix, node), bytes::Bytes::new())
        .await;
}

/// Takes another node's change or part of its whole set: acknowledges it
/// on its reply subject once taken, and asks for the whole set where a
/// change was missed.
pub(super) async fn heard(shared: &Shared, msg: async_nats::Message) {
    let Ok(said) = serde_json::from_slice::<Said>(&msg.payload) else {
        tracing::debug!("cluster: ignored a malformed filters message");
        return;
    };
    if said.node == shared.node {
        return;
    }
    let (node, version) = (said.node.clone(), said.version);
    // Heard, as by a hello: its filters are not forgotten at the next
    // tidying should its first hello come later.
    shared
        .peers
        .lock()
        .insert(node.clone(), std::time::Instant::now());
    let next = shared.interest.said(said);
    if let Some(reply) = msg.reply {
        let ack = Ack {
            node: shared.node.clone(),
            version,
        };
        let body = serde_json::to_vec(&ack).unwrap_or_default();
        let _ = shared.client.publish(reply, body.into()).await;
    }
    if next == Next::Ask {
        ask(shared, &node).await;
    }
}

/// Takes an acknowledgement of this node's changes.
pub(super) fn acked(shared: &Shared, msg: &async_nats::Message) {
    if let Ok(ack) = serde_json::from_slice::<Ack>(&msg.payload) {
        shared.interest.ack(ack);
    }
}

/// Answers a starting node's roll call: this node and the nodes it heard
/// lately that tell their filters.
pub(super) async fn answer_roll(shared: &Shared, msg: async_nats::Message) {
    let Some(reply) = msg.reply else {
        return;
    };
    let roll = Roll {
        node: shared.node.clone(),
        peers: shared.interest.speaking(&shared.up()),
    };
    let body = serde_json::to_vec(&roll).unwrap_or_default();
    let _ = shared.client.publish(reply, body.into()).await;
}

/// A starting node's roll call: the nodes up that tell their filters, as
/// one running node knows them (none when no node answers), so that this
/// node's first subscribes wait for them to take its filters.
pub(super) async fn roll_call(
    client: &async_nats::Client,
    prefix: &str,
    node: &str,
    limit: Duration,
) -> Vec<String> {
    let request = async_nats::Request::new()
        .timeout(Some(limit))
        .payload(node.to_owned().into());
    match client.send_request(roll_subject(prefix), request).await {
        Ok(msg) => match serde_json::from_slice::<Roll>(&msg.payload) {
            Ok(roll) => std::iter::once(roll.node)
                .chain(roll.peers)
                .filter(|n| n != node && !n.is_empty() && n.len() <= 256)
                .take(4096)
                .collect(),
            Err(_) => Vec::new(),
        },
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Vec::new(),
        Err(e) => {
            tracing::warn!("cluster: no node answered the roll call: {e}");
            Vec::new()
        }
    }
}
