//! Maps that give back what they grew to, and lists that take no more
//! than they hold.
//!
//! A `HashMap` keeps its table after its entries go: a broker that held
//! 10,000 sessions or topics for a while would keep their tables for good.
//! The registries call [`shrink_if_sparse`] after a removal. And a `Vec`'s
//! first push makes room for four: lists that mostly hold one (a topic's
//! subscribers, a filter's, a connection's subscriptions) use
//! [`push_snug`], so that each idle one holds one slot, not four.

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, Hash};

/// Tables this small are kept whatever their use.
const KEEP: usize = 1024;

/// A collection that can give back room: what [`shrink_sparse`] works on.
pub(crate) trait Room {
    /// Entries held.
    fn len(&self) -> usize;
    /// Entries there is room for.
    fn capacity(&self) -> usize;
    /// Gives back room down to `room` entries (at least its length).
    fn shrink_to(&mut self, room: usize);
}

impl<T> Room for Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn capacity(&self) -> usize {
        Vec::capacity(self)
    }
    fn shrink_to(&mut self, room: usize) {
        Vec::shrink_to(self, room);
    }
}

impl<T: Ord> Room for BinaryHeap<T> {
    fn len(&self) -> usize {
        BinaryHeap::len(self)
    }
    fn capacity(&self) -> usize {
        BinaryHeap::capacity(self)
    }
    fn shrink_to(&mut self, room: usize) {
        BinaryHeap::shrink_to(self, room);
    }
}

impl<K: Eq + Hash, V, S: BuildHasher> Room for HashMap<K, V, S> {
    fn len(&self) -> usize {
        HashMap::len(self)
    }
    fn capacity(&self) -> usize {
        HashMap::capacity(self)
    }
    fn shrink_to(&mut self, room: usize) {
        HashMap::shrink_to(self, room);
    }
}

/// Shrinks `c` to twice its length once it is three-quarters empty (and
/// holds room for more than `keep` entries). The next shrink needs it to
/// lose three-quarters again, so removals stay amortised O(1).
pub(crate) fn shrink_sparse(c: &mut impl Room, keep: usize) {
    if c.capacity() > keep && c.len() < c.capacity() / 4 {
        let len = c.len();
        c.shrink_to(len * 2);
    }
}

/// [`shrink_sparse`] for the registries' tables, which are kept up to
/// [`KEEP`] entries' room (a shrink rehashes what is left).
pub(crate) fn shrink_if_sparse<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    shrink_sparse(map, KEEP);
}

/// Pushes `value`, making room for exactly one if `list` has none (later
/// pushes grow it as usual).
pub(crate) fn push_snug<T>(list: &mut Vec<T>, value: T) {
    if list.capacity() == 0 {
        list.reserve_exact(1);
    }
    list.push(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_push_takes_one_slot_and_later_ones_grow_as_usual() {
        let mut list = Vec::new();
        push_snug(&mut list, 1u64);
        assert_eq!(list.capacity(), 1);
        push_snug(&mut list, 2);
        push_snug(&mut list, 3);
        assert_eq!(list, [1, 2, 3]);
        assert!(list.capacity() >= 3);
    }

    #[test]
    fn shrinks_only_when_mostly_empty_and_large() {
        let mut small: HashMap<u32, u32> = (0..500).map(|k| (k, k)).collect();
        small.retain(|k, _| *k < 10);
        let before = small.capacity();
        shrink_if_sparse(&mut small);
        assert_eq!(small.capacity(), before, "small tables are kept");

        let mut map: HashMap<u32, u32> = (0..10_000).map(|k| (k, k)).collect();
        map.retain(|k, _| *k < 5_000);
        // (A table's reported capacity drops as removals leave
        // tombstones: compare with itself just before.)
        let half = map.capacity();
        shrink_if_sparse(&mut map);
        assert_eq!(map.capacity(), half, "half empty is not sparse enough");
        map.retain(|k, _| *k < 100);
        shrink_if_sparse(&mut map);
        assert!(map.capacity() < 1024, "{} left for 100", map.capacity());
        assert_eq!(map.len(), 100);
        assert!((0..100).all(|k| map.get(&k) == Some(&k)), "nothing lost");
    }
}
