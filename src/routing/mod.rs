//! Topic names, MQTT-style topic filters, and the filter trie that finds the
//! wildcard subscriptions matching a topic without scanning them all.
//!
//! Names are `/`-separated levels. In a filter, `+` matches exactly one
//! level and `#` (last level only) matches the rest, including nothing:
//! `a/#` matches `a`, `a/b` and `a/b/c`. As in MQTT, a topic whose first
//! level starts with `$` is not matched by a filter starting with `+` or
//! `#`, so `#` does not see `$sys/...`.
//!
//! # Design notes
//!
//! `TopicLimits` (`[topics] max_levels`, `max_name_bytes`) is checked
//! wherever a name enters: the broker's `check_topic` and `check_filter`
//! for every publish and subscribe, queue names too. What the store gives
//! back at start is checked against `TopicLimits::WIDEST` instead, so
//! lowering the configured limits never drops stored data.
//!
//! The `FilterTrie` (`trie.rs`) keeps one level per node; the broker keeps
//! its wildcard subscriptions in one, the rules their candidate filters,
//! the cluster its NATS filters by id (to take each topic from the oldest
//! filter matching it). Removing a filter prunes the nodes left empty, and
//! dropping the trie walks it with a stack of its own rather than
//! recursively, so a deep filter cannot overflow the thread's stack.
//!
//! Three kinds of comparison: `matches` is MQTT's (a filter starting with
//! `+` or `#` does not match a `$` topic); `covers` and `covers_levels` say
//! whether one filter allows everything another matches (permissions check
//! subscriptions with `covers_levels`, level by level, without the `$`
//! rule); `overlaps` says whether two filters share a topic (the cluster
//! keeps an unused NATS filter while a newer one overlaps it).

mod trie;

pub use trie::FilterTrie;

/// Longest topic name or filter any configuration accepts, in bytes
/// (MQTT's limit).
pub const MAX_TOPIC_LEN: usize = 65_535;

/// Most levels in a topic name or filter any configuration accepts.
pub const MAX_TOPIC_LEVELS: usize = 1_024;

/// Bounds on topic names and filters (`[topics] max_levels` and
/// `max_name_bytes`). They exist because a name's size becomes memory in
/// the filter trie and the registry, and its depth the length of every
/// walk: every way a name enters the broker checks it against these.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopicLimits {
    /// Most `/`-separated levels.
    pub max_levels: usize,
    /// Most bytes.
    pub max_bytes: usize,
}

impl TopicLimits {
    /// `[topics]`'s defaults: 32 levels, 1 KiB.
    pub const DEFAULT: TopicLimits = TopicLimits {
        max_levels: 32,
        max_bytes: 1024,
    };

    /// The widest bounds a configuration may set; what the store gives
    /// back at start is checked against these, so that lowering the
    /// configured limits never drops stored data.
    pub const WIDEST: TopicLimits = TopicLimits {
        max_levels: MAX_TOPIC_LEVELS,
        max_bytes: MAX_TOPIC_LEN,
    };

    /// The checks names and filters share; says whether `s` holds a
    /// wildcard character. One pass over the bytes: every publish comes
    /// here.
    fn check_common(&self, s: &str) -> Result<bool, TopicError> {
        if s.is_empty() {
            return Err(TopicError::Empty);
        }
        if s.len() > self.max_bytes {
            return Err(TopicError::TooLong {
                bytes: s.len(),
                max: self.max_bytes,
            });
        }
        let (mut levels, mut nul, mut wild) = (1, false, false);
        for &b in s.as_bytes() {
            match b {
                b'/' => levels += 1,
                0 => nul = true,
                b'+' | b'#' => wild = true,
                _ => {}
            }
        }
        if levels > self.max_levels {
            return Err(TopicError::TooManyLevels {
                levels,
                max: self.max_levels,
            });
        }
        if nul {
            return Err(TopicError::Nul);
        }
        Ok(wild)
    }

    /// Checks a topic name, the thing one publishes to (and a queue name).
    ///
    /// # Errors
    /// Empty, past the limits, NUL, or a wildcard character.
    pub fn check_topic(&self, name: &str) -> Result<(), TopicError> {
        if self.check_common(name)? {
            return Err(TopicError::WildcardInName);
        }
        Ok(())
    }

    /// Checks a topic filter, the thing one subscribes to.
    ///
    /// # Errors
    /// Empty, past the limits, NUL, a wildcard sharing a level, or `#` not
    /// last.
    pub fn check_filter(&self, filter: &str) -> Result<(), TopicError> {
        if !self.check_common(filter)? {
            return Ok(());
        }
        let mut levels = filter.split('/').peekable();
        while let Some(level) = levels.next() {
            match level {
                "#" if levels.peek().is_some() => return Err(TopicError::HashNotLast),
                "#" | "+" => {}
                other if other.contains(['+', '#']) => {
                    return Err(TopicError::PartialWildcard(other.to_owned()));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

impl Default for TopicLimits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a topic name or filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// Names and filters have at least one character.
    #[error("must not be empty")]
    Empty,
    /// Longer than `[topics] max_name_bytes`.
    #[error("is {bytes} bytes long, more than the limit of {max} ([topics] max_name_bytes)")]
    TooLong {
        /// The name's length.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// More levels than `[topics] max_levels`.
    #[error("has {levels} levels, more than the limit of {max} ([topics] max_levels)")]
    TooManyLevels {
        /// The name's levels.
        levels: usize,
        /// The limit.
        max: usize,
    },
    /// NUL is not allowed anywhere.
    #[error("contains a NUL character")]
    Nul,
    /// A topic name (where one publishes) contains `+` or `#`.
    #[error("a topic name cannot contain the wildcards '+' or '#'")]
    WildcardInName,
    /// `+` or `#` shares a level with other characters (`a+/b`).
    #[error("a wildcard must be a whole level: {0:?}")]
    PartialWildcard(String),
    /// `#` is not the last level (`a/#/b`).
    #[error("'#' may only be the last level")]
    HashNotLast,
}

/// The start of the topics on which the broker announces who joins and
/// leaves a topic with presence (`$presence/chat/room1` for
/// `chat/room1`): only the broker publishes there, and subscribing needs
/// the right to subscribe to the topic itself.
pub const PRESENCE_PREFIX: &str = "$presence/";

/// Whether a (valid) filter has a wildcard, so it must go through the trie
/// rather than straight to one topic.
pub fn is_wildcard(filter: &str) -> bool {
    filter.split('/').any(|l| l == "+" || l == "#")
}

/// Whether `filter` matches `topic`. Both are assumed valid. The trie gives
/// the same answers faster for many filters; this is the reference.
pub fn matches(filter: &str, topic: &str) -> bool {
    if topic.starts_with('$') && (filter.starts_with('+') || filter.starts_with('#')) {
        return false;
    }
    matches_levels(filter, topic)
}

/// [`matches()`] level by level only, without the `$` rule: a permission
/// of `#` grants `$` topics too (permissions are not subscriptions).
pub fn matches_levels(filter: &str, topic: &str) -> bool {
    let mut f = filter.split('/');
    let mut t = topic.split('/');
    loop {
        match (f.next(), t.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(_)) => {}
            (Some(fl), Some(tl)) if fl == tl => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether `allowed` covers `filter`: every topic `filter` matches,
/// `allowed` matches too (`home/+/temp` covers `home/kitchen/temp` but
/// not `home/#`). Both are assumed valid. Permissions check
/// subscriptions with it.
pub fn covers(allowed: &str, filter: &str) -> bool {
    // A wildcard first level does not match `$` topics; a `$` literal
    // first level in `filter` matches only those.
    if (allowed.starts_with('+') || allowed.starts_with('#')) && filter.starts_with('$') {
        return false;
    }
    covers_levels(allowed, filter)
}

/// [`covers`] level by level only, without the `$` rule (see
/// [`matches_levels`]).
pub fn covers_levels(allowed: &str, filter: &str) -> bool {
    // Every topic has a first level, so `+/#` matches what `#` does.
    if allowed == "+/#" {
        return true;
    }
    let mut a = allowed.split('/');
    let mut f = filter.split('/');
    loop {
        match (a.next(), f.next()) {
            (Some("#"), _) => return true,
            (Some("+"), Some(fl)) if fl != "#" => {}
            (Some(al), Some(fl)) if al == fl && al != "+" => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Whether some topic matches both filters (level by level, without the
/// `$` rule, so it may say yes where [`matches()`] never would for both).
/// The cluster keeps a filter's NATS subscription while a newer one
/// overlaps it, so that no topic changes the subscription it arrives by.
pub fn overlaps(a: &str, b: &str) -> bool {
    let mut a = a.split('/');
    let mut b = b.split('/');
    loop {
        match (a.next(), b.next()) {
            (Some("#"), _) | (_, Some("#")) => return true,
            (None, None) => return true,
            (Some("+"), Some(_)) | (Some(_), Some("+")) => {}
            (Some(x), Some(y)) if x == y => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate_topic(s: &str) -> Result<(), TopicError> {
        TopicLimits::WIDEST.check_topic(s)
    }

    fn validate_filter(s: &str) -> Result<(), TopicError> {
        TopicLimits::WIDEST.check_filter(s)
    }

    #[test]
    fn limits() {
        let l = TopicLimits {
            max_levels: 3,
            max_bytes: 10,
        };
        assert!(l.check_topic("a/b/c").is_ok());
        assert!(l.check_filter("a/+/#").is_ok());
        assert_eq!(
            l.check_topic("a/b/c/d"),
            Err(TopicError::TooManyLevels { levels: 4, max: 3 })
        );
        assert_eq!(
            l.check_filter("+/+/+/#"),
            Err(TopicError::TooManyLevels { levels: 4, max: 3 })
        );
        assert_eq!(
            l.check_topic("abcdefghijk"),
            Err(TopicError::TooLong { bytes: 11, max: 10 })
        );
        let deep = format!("{}#", "a/".repeat(8000));
        let err = TopicLimits::DEFAULT.check_filter(&deep).unwrap_err();
        assert!(err.to_string().contains("max_name_bytes"), "{err}");
    }

    #[test]
    fn names() {
        assert!(validate_topic("a/b/c").is_ok());
        assert!(validate_topic("/").is_ok());
        assert!(validate_topic("$sys/x").is_ok());
        assert_eq!(validate_topic(""), Err(TopicError::Empty));
        assert_eq!(validate_topic("a/+"), Err(TopicError::WildcardInName));
        assert_eq!(validate_topic("a#"), Err(TopicError::WildcardInName));
        assert_eq!(validate_topic("a\0"), Err(TopicError::Nul));
        assert_eq!(
            validate_topic(&"x".repeat(MAX_TOPIC_LEN + 1)),
            Err(TopicError::TooLong {
                bytes: MAX_TOPIC_LEN + 1,
                max: MAX_TOPIC_LEN
            })
        );
    }

    #[test]
    fn filters() {
        for ok in ["a/b", "+", "#", "a/+/c", "a/#", "+/+", "/+", "$sys/#"] {
            assert!(validate_filter(ok).is_ok(), "{ok}");
        }
        assert_eq!(validate_filter("a/#/b"), Err(TopicError::HashNotLast));
        assert!(matches!(
            validate_filter("a/b+"),
            Err(TopicError::PartialWildcard(_))
        ));
        assert!(matches!(
            validate_filter("a/#b"),
            Err(TopicError::PartialWildcard(_))
        ));
        assert_eq!(validate_filter(""), Err(TopicError::Empty));
    }

    #[test]
    fn matching() {
        let yes = [
            ("a/b", "a/b"),
            ("a/+", "a/b"),
            ("a/#", "a"),
            ("a/#", "a/b/c"),
            ("#", "a/b"),
            ("+/+", "/x"),
            ("+", ""),
            ("$sys/#", "$sys/load"),
            ("a/+/c", "a/b/c"),
        ];
        for (f, t) in yes {
            assert!(matches(f, t), "{f} should match {t}");
        }
        let no = [
            ("a/b", "a/c"),
            ("a/+", "a/b/c"),
            ("a/+", "a"),
            ("#", "$sys/load"),
            ("+/load", "$sys/load"),
            ("a/b/c", "a/b"),
        ];
        for (f, t) in no {
            assert!(!matches(f, t), "{f} should not match {t}");
        }
    }

    /// Every topic of up to five levels over a small alphabet (with `$x`
    /// and a level no filter names).
    fn small_topics() -> Vec<String> {
        let alphabet = ["a", "b", "$x", "z"];
        let mut all: Vec<String> = alphabet.iter().map(|s| (*s).to_owned()).collect();
        let mut last = all.clone();
        for _ in 1..5 {
            let next: Vec<String> = last
                .iter()
                .flat_map(|t| alphabet.iter().map(move |l| format!("{t}/{l}")))
                .collect();
            all.extend(next.iter().cloned());
            last = next;
        }
        all
    }

    fn filter_strategy() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        (
            proptest::collection::vec(prop_oneof!["a", "b", "\\$x", "\\+"], 0..3),
            any::<bool>(),
        )
            .prop_map(|(mut levels, hash)| {
                if hash || levels.is_empty() {
                    levels.push("#".into());
                }
                levels.join("/")
            })
    }

    proptest::proptest! {
        /// `covers(a, f)` exactly when every topic `f` matches, `a` matches.
        #[test]
        fn covers_agrees_with_matching(a in filter_strategy(), f in filter_strategy()) {
            let topics = small_topics();
            let escapes = topics.iter().find(|t| matches(&f, t) && !matches(&a, t));
            proptest::prop_assert_eq!(
                covers(&a, &f),
                escapes.is_none(),
                "allowed {} filter {} escaping topic {:?}", a, f, escapes
            );
        }
    }

    proptest::proptest! {
        /// The same, level by level (permissions' reading).
        #[test]
        fn covers_levels_agrees_with_matching_levels(a in filter_strategy(), f in filter_strategy()) {
            let topics = small_topics();
            let escapes = topics.iter().find(|t| matches_levels(&f, t) && !matches_levels(&a, t));
            proptest::prop_assert_eq!(
                covers_levels(&a, &f),
                escapes.is_none(),
                "allowed {} filter {} escaping topic {:?}", a, f, escapes
            );
        }
    }

    proptest::proptest! {
        /// `overlaps(a, b)` exactly when some topic matches both, level
        /// by level.
        #[test]
        fn overlaps_agrees_with_matching_levels(a in filter_strategy(), b in filter_strategy()) {
            let both = small_topics()
                .into_iter()
                .find(|t| matches_levels(&a, t) && matches_levels(&b, t));
            proptest::prop_assert_eq!(overlaps(&a, &b), both.is_some(), "{} {} {:?}", a, b, both);
            proptest::prop_assert_eq!(overlaps(&a, &b), overlaps(&b, &a));
        }
    }

    #[test]
    fn covering() {
        for (a, f) in [
            ("home/+/temp", "home/k/temp"),
            ("a/#", "a"),
            ("#", "+/#"),
            ("+", "+"),
        ] {
            assert!(covers(a, f), "{a} should cover {f}");
        }
        for (a, f) in [
            ("home/+/temp", "home/#"),
            ("a/+", "a/#"),
            ("#", "$sys/#"),
            ("a", "+"),
        ] {
            assert!(!covers(a, f), "{a} should not cover {f}");
        }
    }
}
