//! The journal's records (`journal.rs`): a version byte, then
//! operations, each a tag and a key: for a queue, 9 bytes (the store key
//! without the queue's id); for the jobs resource, a job's 16-byte id.
//! Encoding, decoding, rebuilding a queue or the jobs from records, and
//! knowing which records still hold something (no I/O).

use std::collections::{BTreeMap, HashMap};

use bytes::{BufMut, BytesMut};

use crate::store::Write;
use crate::store::jobs::{JOBS_TREE, StoredJob};
use crate::store::queues::{
    DELIVERIES_TREE, MESSAGES_TREE, StoredMessage, decode_deliveries, decode_message, message_key,
};

/// The record format's version byte.
pub(super) const VERSION: u8 = 1;

/// A store key without its queue id: 9 - priority, then the seq.
pub(super) type Key = [u8; 9];

/// A job record's key: the job's id.
pub(super) type JobKey = [u8; 16];

/// One operation of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Op {
    Put {
        delivery: bool,
        key: Key,
        value: Vec<u8>,
    },
    Delete {
        delivery: bool,
        key: Key,
    },
    Range {
        delivery: bool,
        from: Key,
        to: Key,
    },
    /// A job record stored (the jobs resource's journal).
    JobPut {
        id: JobKey,
        value: Vec<u8>,
    },
    /// A job record deleted.
    JobDelete {
        id: JobKey,
    },
    /// Every job record from `from` to `to` deleted (a node installing
    /// the jobs: all of them).
    JobRange {
        from: JobKey,
        to: JobKey,
    },
}

fn short(key: &[u8]) -> Option<Key> {
    key.get(4..13).and_then(|k| Key::try_from(k).ok())
}

fn job_key(key: &[u8]) -> Option<JobKey> {
    JobKey::try_from(key).ok()
}

impl Op {
    /// A store write as an operation (`None` for other trees).
    pub(super) fn of(w: &Write) -> Option<Op> {
        match w {
            Write::Put { tree, key, value } if *tree == JOBS_TREE => {
                return Some(Op::JobPut {
                    id: job_key(key)?,
                    value: value.clone(),
                });
            }
            Write::Delete { tree, key } if *tree == JOBS_TREE => {
                return Some(Op::JobDelete { id: job_key(key)? });
            }
            Write::DeleteRange { tree, from, to } if *tree == JOBS_TREE => {
                return Some(Op::JobRange {
                    from: job_key(from)?,
                    to: job_key(to)?,
                });
            }
            _ => {}
        }
        let delivery = |tree: &str| match tree {
            MESSAGES_TREE => Some(false),
            DELIVERIES_TREE => Some(true),
            _ => None,
        };
        Some(match w {
            Write::Put { tree, key, value } => Op::Put {
                delivery: delivery(tree)?,
                key: short(key)?,
                value: value.clone(),
            },
            Write::Delete { tree, key } => Op::Delete {
                delivery: delivery(tree)?,
                key: short(key)?,
            },
            Write::DeleteRange { tree, from, to } => Op::Range {
                delivery: delivery(tree)?,
                from: short(from)?,
                to: short(to)?,
            },
        })
    }

    pub(super) fn encoded_len(&self) -> usize {
        match self {
            Op::Put { value, .. } => 1 + 9 + 4 + value.len(),
            Op::Delete { .. } => 1 + 9,
            Op::Range { .. } => 1 + 18,
            Op::JobPut { value, .. } => 1 + 16 + 4 + value.len(),
            Op::JobDelete { .. } => 1 + 16,
            Op::JobRange { .. } => 1 + 32,
        }
    }

    fn is_put(&self) -> bool {
        matches!(self, Op::Put { .. } | Op::JobPut { .. })
    }

    fn is_range(&self) -> bool {
        matches!(self, Op::Range { .. } | Op::JobRange { .. })
    }

    pub(super) fn encode(&self, out: &mut BytesMut) {
        match self {
            Op::Put {
                delivery,
                key,
                value,
            } => {
                out.put_u8(if *delivery { 3 } else { 1 });
                out.put_slice(key);
                out.put_u32(u32::try_from(value.len()).unwrap_or(u32::MAX));
                out.put_slice(value);
            }
            Op::Delete { delivery, key } => {
                out.put_u8(if *delivery { 4 } else { 2 });
                out.put_slice(key);
            }
            Op::Range { delivery, from, to } => {
                out.put_u8(if *delivery { 6 } else { 5 });
                out.put_slice(from);
                out.put_slice(to);
            }
            Op::JobPut { id, value } => {
                out.put_u8(7);
                out.put_slice(id);
                out.put_u32(u32::try_from(value.len()).unwrap_or(u32::MAX));
                out.put_slice(value);
            }
            Op::JobDelete { id } => {
                out.put_u8(8);
                out.put_slice(id);
            }
            Op::JobRange { from, to } => {
                out.put_u8(9);
                out.put_slice(from);
                out.put_slice(to);
            }
        }
    }
}

/// The operations of a record, or `None` if it does not read.
pub(super) fn decode(record: &[u8]) -> Option<Vec<Op>> {
    let (&version, mut rest) = record.split_first()?;
    if version != VERSION {
        return None;
    }
    let mut ops = Vec::new();
    let key = |b: &[u8]| Key::try_from(b.get(..9)?).ok();
    let id = |b: &[u8]| JobKey::try_from(b.get(..16)?).ok();
    while let Some((&tag, body)) = rest.split_first() {
        match tag {
            7 => {
                let len = u32::from_be_bytes(body.get(16..20)?.try_into().ok()?) as usize;
                ops.push(Op::JobPut {
                    id: id(body)?,
                    value: body.get(20..20 + len)?.to_vec(),
                });
                rest = &body[20 + len..];
                continue;
            }
            8 => {
                ops.push(Op::JobDelete { id: id(body)? });
                rest = &body[16..];
                continue;
            }
            9 => {
                ops.push(Op::JobRange {
                    from: id(body)?,
                    to: id(body.get(16..)?)?,
                });
                rest = &body[32..];
                continue;
            }
            _ => {}
        }
        let k = key(body)?;
        match tag {
            1 | 3 => {
                let len = u32::from_be_bytes(body.get(9..13)?.try_into().ok()?) as usize;
                let value = body.get(13..13 + len)?.to_vec();
                ops.push(Op::Put {
                    delivery: tag == 3,
                    key: k,
                    value,
                });
                rest = &body[13 + len..];
            }
            2 | 4 => {
                ops.push(Op::Delete {
                    delivery: tag == 4,
                    key: k,
                });
                rest = &body[9..];
            }
            5 | 6 => {
                let to = key(body.get(9..)?)?;
                ops.push(Op::Range {
                    delivery: tag == 6,
                    from: k,
                    to,
                });
                rest = &body[18..];
            }
            _ => return None,
        }
    }
    Some(ops)
}

/// A message's stored value and its delivery state's, as records leave
/// them.
type Entry = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A queue's state as records rebuild it: per key, its message and its
/// delivery state (or, for the jobs resource, its job records).
#[derive(Debug, Default)]
pub(in crate::cluster) struct Rebuilt {
    entries: BTreeMap<Key, Entry>,
    jobs: BTreeMap<JobKey, Vec<u8>>,
    /// For purging: where each live put is, and how many each record holds.
    pub(super) live: Live,
}

impl Rebuilt {
    /// Nothing but what `live` says of the records.
    pub(super) fn with_live(live: Live) -> Rebuilt {
        Rebuilt {
            live,
            ..Rebuilt::default()
        }
    }

    pub(super) fn apply(&mut self, ops: &[Op], seq: u64) {
        for op in ops {
            match op {
                Op::Put {
                    delivery,
                    key,
                    value,
                } => {
                    let e = self.entries.entry(*key).or_default();
                    let slot = if *delivery { &mut e.1 } else { &mut e.0 };
                    *slot = Some(value.clone());
                    self.live.put(queue_key(*delivery, key), seq);
                }
                Op::Delete { delivery, key } => {
                    if let Some(e) = self.entries.get_mut(key) {
                        if *delivery { e.1 = None } else { e.0 = None }
                    }
                    self.live.delete(&queue_key(*delivery, key));
                }
                Op::Range { delivery, from, to } => {
                    for (k, e) in self.entries.range_mut(*from..=*to) {
                        if *delivery {
                            e.1 = None
                        } else {
                            e.0 = None
                        }
                        self.live.delete(&queue_key(*delivery, k));
                    }
                }
                Op::JobPut { id, value } => {
                    self.jobs.insert(*id, value.clone());
                    self.live.put((JOB, *id), seq);
                }
                Op::JobDelete { id } => {
                    self.jobs.remove(id);
                    self.live.delete(&(JOB, *id));
                }
                Op::JobRange { from, to } => {
                    let gone: Vec<JobKey> = self.jobs.range(*from..=*to).map(|(k, _)| *k).collect();
                    for id in gone {
                        self.jobs.remove(&id);
                        self.live.delete(&(JOB, id));
                    }
                }
            }
        }
        self.entries.retain(|_, e| e.0.is_some() || e.1.is_some());
    }

    /// The job records the records leave (the jobs resource's journal),
    /// oldest id first; taken out, so the rest (`live`) stays.
    pub(in crate::cluster) fn take_jobs(&mut self) -> Vec<StoredJob> {
        std::mem::take(&mut self.jobs).into_iter().collect()
    }

    /// The messages the records leave, with their delivery state.
    pub(in crate::cluster) fn messages(&self) -> Vec<StoredMessage> {
        self.entries
            .iter()
            .filter_map(|(k, (m, d))| {
                let mut key = message_key(0, 0, 0);
                key[4..].copy_from_slice(k);
                let (_, mut msg) = decode_message(&key, m.as_deref()?)?;
                if let Some((n, nb)) = d.as_deref().and_then(decode_deliveries) {
                    msg.deliveries = n;
                    msg.not_before_ms = nb;
                }
                Some(msg)
            })
            .collect()
    }
}

/// What a live put is of: a message (0), its delivery state (1) or a job
/// record ([`JOB`]), and its key (a queue's 9 bytes padded with zeros,
/// which keeps their order).
type LiveKey = (u8, JobKey);

/// The kind of a job record's [`LiveKey`].
const JOB: u8 = 2;

fn queue_key(delivery: bool, key: &Key) -> LiveKey {
    let mut k = JobKey::default();
    k[..9].copy_from_slice(key);
    (u8::from(delivery), k)
}

/// Which records hold live puts: a record below the oldest of them holds
/// nothing anyone needs.
#[derive(Debug, Default)]
pub(super) struct Live {
    at: HashMap<LiveKey, u64>,
    count: BTreeMap<u64, u32>,
}

impl Live {
    fn put(&mut self, key: LiveKey, seq: u64) {
        if let Some(old) = self.at.insert(key, seq) {
            self.drop_one(old);
        }
        *self.count.entry(seq).or_default() += 1;
    }

    fn delete(&mut self, key: &LiveKey) {
        if let Some(old) = self.at.remove(key) {
            self.drop_one(old);
        }
    }

    /// Deletes every live key of `kind` from `from` to `to`.
    fn delete_range(&mut self, kind: u8, from: JobKey, to: JobKey) {
        let gone: Vec<LiveKey> = self
            .at
            .keys()
            .filter(|(k, key)| *k == kind && *key >= from && *key <= to)
            .copied()
            .collect();
        for k in gone {
            self.delete(&k);
        }
    }

    fn drop_one(&mut self, seq: u64) {
        if let Some(n) = self.count.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                self.count.remove(&seq);
            }
        }
    }

    /// The oldest record still holding a live put.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.count.keys().next().copied()
    }
}

impl Rebuilt {
    /// Records where `ops` (appended as record `seq`) put things, for
    /// purging, without keeping their values.
    pub(super) fn track(&mut self, ops: &[Op], seq: u64) {
        for op in ops {
            match op {
                Op::Put { delivery, key, .. } => self.live.put(queue_key(*delivery, key), seq),
                Op::Delete { delivery, key } => self.live.delete(&queue_key(*delivery, key)),
                Op::Range { delivery, from, to } => {
                    let (kind, from) = queue_key(*delivery, from);
                    self.live
                        .delete_range(kind, from, queue_key(*delivery, to).1);
                }
                Op::JobPut { id, .. } => self.live.put((JOB, *id), seq),
                Op::JobDelete { id } => self.live.delete(&(JOB, *id)),
                Op::JobRange { from, to } => self.live.delete_range(JOB, *from, *to),
            }
        }
    }
}

/// A group's operations in two rounds: every queue's puts, then the
/// rest. A queue whose puts follow a range delete (deleted and made
/// again) keeps its order, all in the first round.
pub(super) fn split_puts_first(
    per: BTreeMap<u32, Vec<Op>>,
) -> (BTreeMap<u32, Vec<Op>>, BTreeMap<u32, Vec<Op>>) {
    let (mut first, mut then) = (BTreeMap::new(), BTreeMap::new());
    for (id, ops) in per {
        let range_then_put = ops
            .iter()
            .position(Op::is_range)
            .is_some_and(|at| ops[at..].iter().any(Op::is_put));
        if range_then_put {
            first.insert(id, ops);
            continue;
        }
        let (puts, rest): (Vec<Op>, Vec<Op>) = ops.into_iter().partition(Op::is_put);
        if !puts.is_empty() {
            first.insert(id, puts);
        }
        if !rest.is_empty() {
            then.insert(id, rest);
        }
    }
    (first, then)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::queues::{delete_message, put_deliveries, put_message};
    use bytes::Bytes;

    fn msg(seq: u64, priority: u8) -> StoredMessage {
        StoredMessage {
            seq,
            priority,
            headers: Default::default(),
            payload: Bytes::from(format!("m{seq}")),
            enqueued_ms: 1,
            expires_ms: 0,
            deliveries: 0,
            not_before_ms: 0,
        }
    }

    fn record(writes: &[Write]) -> Vec<u8> {
        let mut b = BytesMut::new();
        b.put_u8(VERSION);
        for w in writes {
            Op::of(w).unwrap().encode(&mut b);
        }
        b.to_vec()
    }

    #[test]
    fn records_rebuild_what_the_writes_leave_and_know_what_may_be_purged() {
        let mut delivered = msg(2, 5);
        delivered.deliveries = 3;
        let r1 = record(&[
            put_message(7, &msg(1, 0)),
            put_message(7, &delivered),
            put_message(7, &msg(3, 0)),
        ]);
        let r2 = record(&[put_deliveries(7, &delivered)]);
        let [a, b] = delete_message(7, 0, 1);
        let r3 = record(&[a, b]);
        let mut rebuilt = Rebuilt::default();
        for (seq, r) in [(10, &r1), (11, &r2), (12, &r3)] {
            rebuilt.apply(&decode(r).unwrap(), seq);
        }
        let got = rebuilt.messages();
        assert_eq!(got.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(got[0].deliveries, 3);
        assert_eq!(got[0].priority, 5);
        assert_eq!(got[1].payload, Bytes::from("m3"));
        assert_eq!(rebuilt.live.oldest(), Some(10), "3 and 2 are still in it");
        // A purge of the rest (as a queue purge writes it) leaves nothing.
        let (from, to) = crate::store::queues::queue_range(7);
        let r4 = record(&[
            Write::DeleteRange {
                tree: MESSAGES_TREE,
                from: from.clone(),
                to: to.clone(),
            },
            Write::DeleteRange {
                tree: DELIVERIES_TREE,
                from,
                to,
            },
        ]);
        rebuilt.apply(&decode(&r4).unwrap(), 13);
        assert!(rebuilt.messages().is_empty());
        assert_eq!(rebuilt.live.oldest(), None);
    }

    #[test]
    fn a_group_over_several_queues_appends_its_puts_first() {
        let (puts_and_deletes, _) = (1u32, 0);
        let [del, _] = delete_message(7, 0, 1);
        let mut per = BTreeMap::new();
        per.insert(
            puts_and_deletes,
            vec![
                Op::of(&del).unwrap(),
                Op::of(&put_message(7, &msg(2, 0))).unwrap(),
            ],
        );
        let (from, to) = crate::store::queues::queue_range(8);
        let range = Write::DeleteRange {
            tree: MESSAGES_TREE,
            from,
            to,
        };
        per.insert(
            2,
            vec![
                Op::of(&range).unwrap(),
                Op::of(&put_message(8, &msg(1, 0))).unwrap(),
            ],
        );
        let (first, then) = split_puts_first(per);
        assert!(matches!(first[&1][..], [Op::Put { .. }]));
        assert!(matches!(then[&1][..], [Op::Delete { .. }]));
        assert_eq!(first[&2].len(), 2, "a range then a put keep their order");
        assert!(!then.contains_key(&2));
    }

    #[test]
    fn job_records_rebuild_the_jobs_and_know_what_may_be_purged() {
        use crate::store::jobs;
        let r1 = record(&[
            jobs::put(&[1; 16], b"queued".to_vec()),
            jobs::put(&[2; 16], b"queued".to_vec()),
        ]);
        let r2 = record(&[jobs::put(&[1; 16], b"running".to_vec())]);
        let r3 = record(&[jobs::delete(&[2; 16])]);
        let mut rebuilt = Rebuilt::default();
        for (seq, r) in [(5, &r1), (6, &r2), (7, &r3)] {
            rebuilt.apply(&decode(r).unwrap(), seq);
        }
        assert_eq!(rebuilt.live.oldest(), Some(6), "record 5 holds nothing now");
        assert!(rebuilt.messages().is_empty(), "no queue message");
        // Installed elsewhere: every record deleted, one put again.
        let r4 = record(&[jobs::delete_all(), jobs::put(&[3; 16], b"new".to_vec())]);
        rebuilt.apply(&decode(&r4).unwrap(), 8);
        assert_eq!(rebuilt.take_jobs(), vec![([3; 16], b"new".to_vec())]);
        assert_eq!(rebuilt.live.oldest(), Some(8));
        // Tracking (the appending side) agrees with rebuilding.
        let mut tracked = Rebuilt::default();
        for (seq, r) in [(5, &r1), (6, &r2), (7, &r3), (8, &r4)] {
            tracked.track(&decode(r).unwrap(), seq);
        }
        assert_eq!(tracked.live.oldest(), Some(8));
        // A job's put goes before a queue's delete in a group of both.
        let mut per = BTreeMap::new();
        let [del, _] = delete_message(7, 0, 1);
        per.insert(7, vec![Op::of(&del).unwrap()]);
        per.insert(
            crate::store::replica::JOBS_ID,
            vec![Op::of(&jobs::put(&[4; 16], b"dead".to_vec())).unwrap()],
        );
        let (first, then) = split_puts_first(per);
        assert_eq!(first.len(), 1);
        assert!(matches!(
            first[&crate::store::replica::JOBS_ID][..],
            [Op::JobPut { .. }]
        ));
        assert!(matches!(then[&7][..], [Op::Delete { .. }]));
    }

    #[test]
    fn unreadable_records_are_refused() {
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[9]), None);
        assert_eq!(decode(&[VERSION, 1, 0]), None);
        assert_eq!(decode(&[VERSION, 99, 0, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(decode(&[VERSION, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        assert_eq!(decode(&[VERSION]), Some(vec![]));
    }
}
