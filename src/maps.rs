//! Maps that give back what they grew to.
//!
//! A `HashMap` keeps its table after its entries go: a broker that held
//! 10,000 sessions or topics for a while would keep their tables for good.
//! The registries call [`shrink_if_sparse`] after a removal.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};

/// Tables this small are kept whatever their use.
const KEEP: usize = 1024;

/// Shrinks `map` to twice its length once it is three-quarters empty (and
/// holds room for more than [`KEEP`] entries). A shrink rehashes what is
/// left, and the next one needs the map to lose three-quarters again, so
/// removals stay amortised O(1).
pub(crate) fn shrink_if_sparse<K: Eq + Hash, V, S: BuildHasher>(map: &mut HashMap<K, V, S>) {
    if map.capacity() > KEEP && map.len() < map.capacity() / 4 {
        let len = map.len();
        map.shrink_to(len * 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
