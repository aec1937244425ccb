//! The cluster's series on `/metrics`: its link, what crossed it, the
//! nodes heard, conflicts, and queue failover.

use prometheus_client::encoding::DescriptorEncoder;

use super::{Out, counter, counters, gauge, gauges};

/// The cluster's series: its link, what crossed it, the nodes heard,
/// and conflicts (a node named as this one, members that differ).
pub(super) fn cluster(e: &mut DescriptorEncoder<'_>, c: &crate::cluster::ClusterStatus) -> Out {
    gauge(
        e,
        "wharf_cluster_connected",
        "1 while the link to NATS is connected.",
        i64::from(c.state == "connected"),
    )?;
    counter(
        e,
        "wharf_cluster_connects",
        "Times the link connected to NATS.",
        c.connects,
    )?;
    let up = c.peers.iter().filter(|p| p.up).count();
    gauges(
        e,
        "wharf_cluster_peers",
        "Other nodes heard, by whether they were heard lately.",
        "state",
        &[("up", up as i64), ("lost", (c.peers.len() - up) as i64)],
    )?;
    counters(
        e,
        "wharf_cluster_messages",
        "Publishes that crossed the cluster: forwarded to NATS, not_wanted (no other node listens, \
         not sent), dropped (buffer full), failed (NATS refused), resent (sent again after NATS \
         was lost), received from other nodes, repeats (copies already had, ignored), refused \
         here, lost (this node fell behind).",
        "outcome",
        &[
            ("forwarded", c.forwarded),
            ("not_wanted", c.not_wanted),
            ("dropped", c.dropped),
            ("failed", c.failed),
            ("resent", c.resent),
            ("received", c.received),
            ("repeats", c.repeats),
            ("refused", c.refused),
            ("lost", c.lost),
        ],
    )?;
    gauge(
        e,
        "wharf_cluster_forwarding_all",
        "1 while every publish goes to NATS, wanted by another node or not (just connected, \
         or some node's filters are not known here).",
        i64::from(c.forwarding_all),
    )?;
    gauge(
        e,
        "wharf_cluster_buffered",
        "Publishes waiting for NATS now.",
        c.buffered as i64,
    )?;
    gauges(
        e,
        "wharf_cluster_conflicts",
        "Other processes heard using this node's name (same_name), and peers whose members differ (members).",
        "kind",
        &[
            ("same_name", c.same_name.len() as i64),
            ("members", c.other_members.len() as i64),
        ],
    )?;
    let Some(f) = &c.failover else {
        return Ok(());
    };
    gauge(
        e,
        "wharf_cluster_leases",
        "Queue leases this node holds (it is those queues' home).",
        f.leases.len() as i64,
    )?;
    counters(
        e,
        "wharf_cluster_failover",
        "Queue failover events: queues taken over here, leases lost while held.",
        "event",
        &[("taken_over", f.taken_over), ("lease_lost", f.leases_lost)],
    )?;
    counters(
        e,
        "wharf_cluster_journal_appends",
        "Journal appends of held queues' writes, by outcome (a failed one's writes were not confirmed).",
        "outcome",
        &[("ok", f.journal_appended), ("failed", f.journal_failed)],
    )
}
