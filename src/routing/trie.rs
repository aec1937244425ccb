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

/// A node's literal children. Hashed with foldhash (seeded per map):
/// every walk hashes each level of the topic, and the cluster walks on
/// every publish.
type Children<V> = HashMap<Box<str>, Node<V>, foldhash::fast::RandomState>;

#[derive(Debug)]
struct Node<V> {
    /// Boxed, and `None` while empty: most nodes are leaves (a filter's
    /// last level), and each node sits in its parent's table, which keeps
    /// room for up to twice its entries, so 32 B less per node is up to
    /// 64 B less per filter (64 B a node, not 96).
    children: Option<Box<Children<V>>>,
    plus: Option<Box<Node<V>>>,
    /// Values of filters ending in `#` at this node.
    hash: Vec<V>,
    /// Values of filters ending exactly at this node.
    here: Vec<V>,
}

impl<V> Default for Node<V> {
    fn default() -> Self {
        Node {
            children: None,
            plus: None,
            hash: Vec::new(),
            here: Vec::new(),
        }
    }
}

impl<V> Drop for Node<V> {
    /// Drops the subtree node by node: a deep branch must not drop
    /// recursively, one stack frame per level.
    fn drop(&mut self) {
        let mut stack: Vec<Node<V>> = Vec::new();
        stack.extend(
            self.children
                .take()
                .into_iter()
                .flat_map(|c| c.into_values()),
        );
        stack.extend(self.plus.take().map(|b| *b));
        while let Some(mut node) = stack.pop() {
            stack.extend(
                node.children
                    .take()
                    .into_iter()
                    .flat_map(|c| c.into_values()),
            );
            stack.extend(node.plus.take().map(|b| *b));
        }
    }
}

impl<V> Node<V> {
    /// The child a filter level leads to (`+` is the wildcard child).
    fn child(&self, level: &str) -> Option<&Node<V>> {
        if level == "+" {
            self.plus.as_deref()
        } else {
            self.literal(level)
        }
    }

    /// [`Node::child`], mutable.
    fn child_mut(&mut self, level: &str) -> Option<&mut Node<V>> {
        if level == "+" {
            self.plus.as_deref_mut()
        } else {
            self.children.as_mut()?.get_mut(level)
        }
    }

    /// The child a topic's level leads to (no wildcard).
    fn literal(&self, level: &str) -> Option<&Node<V>> {
        self.children.as_ref()?.get(level)
    }

    /// How many literal children it has.
    fn literals(&self) -> usize {
        self.children.as_ref().map_or(0, |c| c.len())
    }

    fn is_empty(&self) -> bool {
        self.literals() == 0 && self.plus.is_none() && self.hash.is_empty() && self.here.is_empty()
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
                node.children
                    .get_or_insert_default()
                    .entry(level.into())
                    .or_default()
            };
        }
        Self::push(&mut node.here, value, &mut self.len)
    }

    fn push(list: &mut Vec<V>, value: V, len: &mut usize) -> bool {
        if list.contains(&value) {
            false
        } else {
            // Most filters hold one value.
            crate::maps::push_snug(list, value);
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
    ///
    /// Iterative, as every walk here: a filter's depth must never become
    /// the depth of the stack.
    pub fn remove_by(&mut self, filter: &str, pred: impl Fn(&V) -> bool) -> bool {
        let levels: Vec<&str> = filter.split('/').collect();
        let (path, hash) = match levels.split_last() {
            Some((&"#", rest)) => (rest, true),
            _ => (&levels[..], false),
        };
        // Down to the filter's node, remembering the deepest node on the way
        // that keeps something besides the path (the prune point).
        let mut node = &mut self.root;
        for &level in path {
            match node.child_mut(level) {
                Some(n) => node = n,
                None => return false,
            }
        }
        let list = if hash { &mut node.hash } else { &mut node.here };
        if !Self::take(list, &pred) {
            return false;
        }
        self.len -= 1;
        self.prune(path);
        true
    }

    /// Whether some value stored under exactly `filter` satisfies `pred`
    /// (not values under other filters that match the same topics).
    pub fn any_at(&self, filter: &str, pred: impl Fn(&V) -> bool) -> bool {
        let levels: Vec<&str> = filter.split('/').collect();
        let (path, hash) = match levels.split_last() {
            Some((&"#", rest)) => (rest, true),
            _ => (&levels[..], false),
        };
        let mut node = &self.root;
        for &level in path {
            match node.child(level) {
                Some(n) => node = n,
                None => return false,
            }
        }
        let list = if hash { &node.hash } else { &node.here };
        list.iter().any(pred)
    }

    /// Cuts the branch along `path` below its last node that still holds
    /// something other than the path itself.
    fn prune(&mut self, path: &[&str]) {
        let mut cut: Option<usize> = None;
        let mut node = &self.root;
        for (depth, &level) in path.iter().enumerate() {
            let Some(next) = node.child(level) else {
                return;
            };
            let keeps_other = !node.here.is_empty()
                || !node.hash.is_empty()
                || node.literals() + usize::from(node.plus.is_some()) > 1;
            if depth == 0 || keeps_other {
                cut = Some(depth);
            }
            node = next;
        }
        if !node.is_empty() {
            return;
        }
        let Some(cut) = cut else { return };
        let mut parent = &mut self.root;
        for &level in &path[..cut] {
            match parent.child_mut(level) {
                Some(n) => parent = n,
                None => return,
            }
        }
        let removed = if path[cut] == "+" {
            parent.plus.take().map(|b| *b)
        } else {
            let children = parent.children.as_mut();
            let removed = children.and_then(|c| {
                let removed = c.remove(path[cut]);
                crate::maps::shrink_if_sparse(c);
                removed
            });
            if parent.literals() == 0 {
                parent.children = None;
            }
            removed
        };
        drop(removed);
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
        let mut removed = 0;
        // Each node is taken out of its parent, filtered, and put back
        // only if it still holds something: a walk on an explicit stack.
        let root = std::mem::take(&mut self.root);
        self.root = Self::retain_owned(root, &keep, &mut removed).unwrap_or_default();
        self.len -= removed;
        removed
    }

    /// Filters a detached subtree without recursion; `None` if it ends up
    /// empty.
    fn retain_owned(
        root: Node<V>,
        keep: &impl Fn(&V) -> bool,
        removed: &mut usize,
    ) -> Option<Node<V>> {
        // Frames of (node, its remaining children, the child key being
        // rebuilt): a post-order walk on an explicit stack.
        enum Key {
            Root,
            Plus,
            Child(Box<str>),
        }
        struct Frame<V> {
            node: Node<V>,
            pending: Vec<(Key, Node<V>)>,
            key: Key,
        }
        let open = |mut node: Node<V>, key: Key, removed: &mut usize| {
            let before = node.here.len() + node.hash.len();
            node.here.retain(|v| keep(v));
            node.hash.retain(|v| keep(v));
            *removed += before - node.here.len() - node.hash.len();
            let mut pending: Vec<(Key, Node<V>)> = node
                .children
                .take()
                .into_iter()
                .flat_map(|c| c.into_iter())
                .map(|(k, child)| (Key::Child(k), child))
                .collect();
            if let Some(plus) = node.plus.take() {
                pending.push((Key::Plus, *plus));
            }
            Frame { node, pending, key }
        };
        let mut stack = vec![open(root, Key::Root, removed)];
        loop {
            let top = stack.last_mut()?;
            if let Some((key, child)) = top.pending.pop() {
                let frame = open(child, key, removed);
                stack.push(frame);
                continue;
            }
            let done = stack.pop()?;
            let node = done.node;
            let Some(parent) = stack.last_mut() else {
                return (!node.is_empty()).then_some(node);
            };
            if node.is_empty() {
                continue;
            }
            match done.key {
                Key::Plus => parent.node.plus = Some(Box::new(node)),
                Key::Child(k) => {
                    parent.node.children.get_or_insert_default().insert(k, node);
                }
                Key::Root => {}
            }
        }
    }

    /// Whether any filter matches the (valid) topic name: what
    /// [`FilterTrie::for_each_match`] would find, without allocating
    /// unless a `+` branch is met, and stopping at the first match (the
    /// cluster asks it on every publish).
    pub fn any_match(&self, topic: &str) -> bool {
        // (node, the topic's levels still to walk, whether wildcards are
        // skipped at this node: the first level of a `$` topic).
        let mut stack: Vec<(&Node<V>, Option<&str>, bool)> = Vec::new();
        let mut at = (&self.root, Some(topic), topic.starts_with('$'));
        loop {
            let (mut node, mut rest, mut skip_wild) = at;
            loop {
                if !skip_wild && !node.hash.is_empty() {
                    return true;
                }
                let Some(levels) = rest else {
                    if !node.here.is_empty() {
                        return true;
                    }
                    break;
                };
                let (level, next) = match levels.split_once('/') {
                    Some((level, next)) => (level, Some(next)),
                    None => (levels, None),
                };
                if !skip_wild && let Some(plus) = node.plus.as_deref() {
                    stack.push((plus, next, false));
                }
                match node.literal(level) {
                    Some(child) => {
                        node = child;
                        rest = next;
                        skip_wild = false;
                    }
                    None => break,
                }
            }
            match stack.pop() {
                Some(next) => at = next,
                None => return false,
            }
        }
    }

    /// Calls `f` with every value whose filter matches the (valid) topic
    /// name. A value under several matching filters is seen once per
    /// filter. Iterative: the stack holds the `+` branches still to visit,
    /// not the topic's depth.
    pub fn for_each_match(&self, topic: &str, mut f: impl FnMut(&V)) {
        let levels: Vec<&str> = topic.split('/').collect();
        let dollar = topic.starts_with('$');
        // (node, index of its level in `levels`, whether wildcards are
        // skipped at this node: the first level of a `$` topic).
        let mut stack: Vec<(&Node<V>, usize, bool)> = vec![(&self.root, 0, dollar)];
        while let Some((mut node, mut depth, mut skip_wild)) = stack.pop() {
            loop {
                if !skip_wild {
                    node.hash.iter().for_each(&mut f);
                }
                let Some(&level) = levels.get(depth) else {
                    node.here.iter().for_each(&mut f);
                    break;
                };
                if !skip_wild {
                    if let Some(plus) = node.plus.as_deref() {
                        stack.push((plus, depth + 1, false));
                    }
                }
                match node.literal(level) {
                    Some(child) => {
                        node = child;
                        depth += 1;
                        skip_wild = false;
                    }
                    None => break,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::routing::matches;

    /// Each filter level is a node in its parent's table (16 B of key
    /// beside it), which keeps room for up to twice its entries.
    #[test]
    fn a_node_is_64_bytes() {
        let size = std::mem::size_of::<Node<crate::broker::Subscription>>();
        assert!(size <= 64, "a node is {size} B");
    }

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
        // Each filter alone: `any_match` says what the matcher says.
        for f in filters {
            let mut one = FilterTrie::new();
            one.insert(f, 0u32);
            for topic in topics {
                assert_eq!(
                    one.any_match(topic),
                    matches(f, topic),
                    "{f:?} on {topic:?}"
                );
            }
        }
        assert!(t.any_match("a/b") && !FilterTrie::<u32>::new().any_match("a"));
    }

    /// Deep filters and topics are walked without recursion: on a thread
    /// with a small stack, a 100,000-level filter is inserted, matched,
    /// removed, kept by `retain` and dropped.
    #[test]
    fn deep_filters_do_not_use_the_stack() {
        let run = || {
            let deep_filter = format!("{}#", "a/".repeat(100_000));
            let deep_plus = format!("{}x", "+/".repeat(100_000));
            let deep_topic = format!("{}x", "a/".repeat(100_000));
            let mut t = FilterTrie::new();
            t.insert(&deep_filter, 1);
            t.insert(&deep_plus, 2);
            t.insert("a/b", 3);
            assert_eq!(matched(&t, &deep_topic), [1, 2]);
            assert!(t.remove(&deep_filter, &1));
            assert_eq!(matched(&t, &deep_topic), [2]);
            assert_eq!(t.retain(|v| *v != 3), 1);
            assert_eq!(matched(&t, &deep_topic), [2]);
            t.insert(&deep_filter, 1);
            drop(t);
        };
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(run)
            .unwrap()
            .join()
            .unwrap();
    }

    /// Removing one filter prunes only its own branch: filters sharing a
    /// prefix, or ending on the removed filter's path, keep matching.
    #[test]
    fn remove_prunes_only_its_branch() {
        let mut t = FilterTrie::new();
        for (f, v) in [("a/b/c/d", 1), ("a/b", 2), ("a/b/+/e", 3), ("a/b/c/#", 4)] {
            t.insert(f, v);
        }
        assert!(t.remove("a/b/c/d", &1));
        assert_eq!(matched(&t, "a/b"), [2]);
        assert_eq!(matched(&t, "a/b/c"), [4]);
        assert_eq!(matched(&t, "a/b/c/e"), [3, 4]);
        assert!(t.remove("a/b/c/#", &4));
        assert_eq!(matched(&t, "a/b/c/e"), [3]);
        assert!(t.remove("a/b", &2));
        assert_eq!(matched(&t, "a/b/x/e"), [3]);
        assert!(t.remove("a/b/+/e", &3));
        assert!(t.root.is_empty(), "branches pruned");
        assert!(!t.remove("a/b/+/e", &3));
    }
}
