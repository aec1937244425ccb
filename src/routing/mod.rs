//! Topic names, MQTT-style topic filters, and the filter trie that finds the
//! wildcard subscriptions matching a topic without scanning them all.
//!
//! Names are `/`-separated levels. In a filter, `+` matches exactly one
//! level and `#` (last level only) matches the rest, including nothing:
//! `a/#` matches `a`, `a/b` and `a/b/c`. As in MQTT, a topic whose first
//! level starts with `$` is not matched by a filter starting with `+` or
//! `#`, so `#` does not see `$sys/...`.

mod trie;

pub use trie::FilterTrie;

/// Longest topic name or filter accepted, in bytes (MQTT's limit).
pub const MAX_TOPIC_LEN: usize = 65_535;

/// Why a topic name or filter was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicError {
    /// Names and filters have at least one character.
    #[error("must not be empty")]
    Empty,
    /// Longer than [`MAX_TOPIC_LEN`] bytes.
    #[error("longer than {MAX_TOPIC_LEN} bytes")]
    TooLong,
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

fn check_common(s: &str) -> Result<(), TopicError> {
    if s.is_empty() {
        return Err(TopicError::Empty);
    }
    if s.len() > MAX_TOPIC_LEN {
        return Err(TopicError::TooLong);
    }
    if s.contains('\0') {
        return Err(TopicError::Nul);
    }
    Ok(())
}

/// Checks a topic name, the thing one publishes to.
///
/// # Errors
/// Empty, too long, NUL, or a wildcard character.
pub fn validate_topic(name: &str) -> Result<(), TopicError> {
    check_common(name)?;
    if name.contains(['+', '#']) {
        return Err(TopicError::WildcardInName);
    }
    Ok(())
}

/// Checks a topic filter, the thing one subscribes to.
///
/// # Errors
/// Empty, too long, NUL, a wildcard sharing a level, or `#` not last.
pub fn validate_filter(filter: &str) -> Result<(), TopicError> {
    check_common(filter)?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
            Err(TopicError::TooLong)
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
}
