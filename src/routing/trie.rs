//! A trie of topic filters, one level per node, so that finding the
//! filters matching a topic costs the topic's depth times the wildcards met,
//! not the number of filters.

use std::collections::HashMap;

/// Filters mapped to values (subscribers). A filter may hold many values;
/// a value may sit under many filters.
#[derive(Debug)]
pub struct FilterTrie<V> {
    root: Node<V>,
    len: usize,
}

#[derive(Debug)]
struct Node<V> {
    children: HashMap<Box<str>, Node<V>>,
    plus: Option<Box<Node<V>>>,
    /// Values of filters ending in `#` at this node.
    hash: Vec<V>,
    /// Values of filters ending exactly at this node.
    here: Vec<V>,
}

impl<V> Default for Node<V> {
    fn default() -> Self {
        Node {
            children: HashMap::new(),
            plus: None,
            hash: Vec::new(),
            here: Vec::new(),
        }
    }
}

impl<V> Node<V> {
    fn is_empty(&self) -> bool {
        self.children.is_empty()
            && self.plus.is_none()
            && self.hash.is_empty()
            && self.here.is_empty()
    }
}

impl<V> Default for FilterTrie<V> {
    fn default() -> Self {
        FilterTrie {
            root: Node::default(),
            len: 0,
        }
    }
}

impl<V: PartialEq> FilterTrie<V> {
    /// An empty trie.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of (filter, value) entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the trie holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `value` under a valid `filter`. Adding the same pair twice keeps
    /// one entry; returns whether it was new.
    pub fn insert(&mut self, filter: &str, value: V) -> bool {
        let mut node = &mut self.root;
        let mut levels = filter.split('/').peekable();
        while let Some(level) = levels.next() {
            if level == "#" && levels.peek().is_none() {
                return Self::push(&mut node.hash, value, &mut self.len);
            }
            node = if level == "+" {
                node.plus.get_or_insert_with(Default::default)
            } else {
                node.children.entry(level.into()).or_default()
            };
        }
        Self::push(&mut node.here, value, &mut self.len)
    }

    fn push(list: &mut Vec<V>, value: V, len: &mut usize) -> bool {
        if list.contains(&value) {
            false
        } else {
            list.push(value);
            *len += 1;
            true
        }
    }

    /// Removes `value` from under `filter`; returns whether it was there.
    /// Empty branches are pruned.
    pub fn remove(&mut self, filter: &str, value: &V) -> bool {
        self.remove_by(filter, |v| v == value)
    }

    /// Removes the first value under `filter` for which `pred` holds;
    /// returns whether one was. Empty branches are pruned.
    pub fn remove_by(&mut self, filter: &str, pred: impl Fn(&V) -> bool) -> bool {
        let levels: Vec<&str> = filter.split('/').collect();
        let removed = Self::remove_at(&mut self.root, &levels, &pred);
        if removed {
            self.len -= 1;
        }
        removed
    }

    fn remove_at(node: &mut Node<V>, levels: &[&str], pred: &impl Fn(&V) -> bool) -> bool {
        let Some((&level, rest)) = levels.split_first() else {
            return Self::take(&mut node.here, pred);
        };
        if level == "#" && rest.is_empty() {
            return Self::take(&mut node.hash, pred);
        }
        if level == "+" {
            let Some(child) = node.plus.as_deref_mut() else {
                return false;
            };
            let removed = Self::remove_at(child, rest, pred);
            if child.is_empty() {
                node.plus = None;
            }
            removed
        } else {
            let Some(child) = node.children.get_mut(level) else {
                return false;
            };
            let removed = Self::remove_at(child, rest, pred);
            if child.is_empty() {
                node.children.remove(level);
            }
            removed
        }
    }

    fn take(list: &mut Vec<V>, pred: &impl Fn(&V) -> bool) -> bool {
        match list.iter().position(pred) {
            Some(i) => {
                list.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// Keeps only the values for which `keep` holds, pruning empty
    /// branches. Returns how many were removed.
    pub fn retain(&mut self, keep: impl Fn(&V) -> bool) -> usize {
        fn walk<V>(node: &mut Node<V>, keep: &impl Fn(&V) -> bool) -> usize {
            let before = node.here.len() + node.hash.len();
            node.here.retain(|v| keep(v));
            node.hash.retain(|v| keep(v));
            let mut removed = before - node.here.len() - node.hash.len();
            node.children.retain(|_, child| {
                removed += walk(child, keep);
                !child.is_empty()
            });
            if let Some(plus) = node.plus.as_deref_mut() {
                removed += walk(plus, keep);
                if plus.is_empty() {
                    node.plus = None;
                }
            }
            removed
        }
        let removed = walk(&mut self.root, &keep);
        self.len -= removed;
        removed
    }

    /// Calls `f` with every value whose filter matches the (valid) topic
    /// name. A value under several matching filters is seen once per
    /// filter.
    pub fn for_each_match(&self, topic: &str, mut f: impl FnMut(&V)) {
        let levels: Vec<&str> = topic.split('/').collect();
        let dollar = topic.starts_with('$');
        Self::walk(&self.root, &levels, dollar, &mut f);
    }

    fn walk(node: &Node<V>, levels: &[&str], skip_wild: bool, f: &mut impl FnMut(&V)) {
        if !skip_wild {
            node.hash.iter().for_each(&mut *f);
        }
        let Some((&level, rest)) = levels.split_first() else {
            node.here.iter().for_each(f);
            return;
        };
        if let Some(child) = node.children.get(level) {
            Self::walk(child, rest, false, f);
        }
        if !skip_wild {
            if let Some(plus) = node.plus.as_deref() {
                Self::walk(plus, rest, false, f);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::matches;

    fn matched(t: &FilterTrie<u32>, topic: &str) -> Vec<u32> {
        let mut out = Vec::new();
        t.for_each_match(topic, |v| out.push(*v));
        out.sort();
        out
    }

    #[test]
    fn insert_match_remove() {
        let mut t = FilterTrie::new();
        assert!(t.insert("a/+", 1));
        assert!(!t.insert("a/+", 1));
        t.insert("a/#", 2);
        t.insert("#", 3);
        t.insert("a/b", 4);
        t.insert("+/b", 5);
        assert_eq!(matched(&t, "a/b"), [1, 2, 3, 4, 5]);
        assert_eq!(matched(&t, "a"), [2, 3]);
        assert_eq!(matched(&t, "$x/b"), Vec::<u32>::new());
        assert!(t.remove("a/+", &1));
        assert!(!t.remove("a/+", &1));
        assert_eq!(matched(&t, "a/b"), [2, 3, 4, 5]);
        for (f, v) in [("a/#", 2), ("#", 3), ("a/b", 4), ("+/b", 5)] {
            assert!(t.remove(f, &v));
        }
        assert!(t.is_empty());
        assert!(t.root.is_empty(), "branches pruned");
    }

    #[test]
    fn retain_drops_values_and_prunes() {
        let mut t = FilterTrie::new();
        for (f, v) in [("a/+", 1), ("a/#", 2), ("b", 3), ("+/c", 4)] {
            t.insert(f, v);
        }
        assert_eq!(t.retain(|v| v % 2 == 0), 2);
        assert_eq!(t.len(), 2);
        assert_eq!(matched(&t, "a/c"), [2, 4]);
        assert_eq!(t.retain(|_| false), 2);
        assert!(t.root.is_empty());
    }

    /// The trie agrees with the reference matcher on every pair.
    #[test]
    fn agrees_with_reference_matcher() {
        let filters = [
            "a", "a/b", "a/+", "a/#", "+", "+/+", "#", "+/b/#", "a/b/c", "/+", "$s/#", "+/#",
            "a/+/c", "", "/",
        ];
        let topics = [
            "a", "a/b", "a/b/c", "b", "/", "/b", "$s/x", "$s", "a//c", "x/b/y", "",
        ];
        let mut t = FilterTrie::new();
        for (i, f) in filters.iter().enumerate() {
            t.insert(f, i as u32);
        }
        for topic in topics {
            let want: Vec<u32> = filters
                .iter()
                .enumerate()
                .filter(|(_, f)| matches(f, topic))
                .map(|(i, _)| i as u32)
                .collect();
            assert_eq!(matched(&t, topic), want, "topic {topic:?}");
        }
    }
}
