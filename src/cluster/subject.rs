//! Topic names and filters as NATS subjects, and back: the only place that
//! knows how Wharf's names look on NATS.
//!
//! A topic `a/b` published under the prefix `wharf` travels on the subject
//! `wharf.t.a.b`: one NATS token per topic level. NATS reserves `.` (the
//! token separator), `*` and `>` (its wildcards) and whitespace, and does
//! not allow empty tokens, while a Wharf level may hold any of them or be
//! empty. So a level is written byte by byte: printable ASCII other than
//! `.`, `*`, `>` and `%` stands for itself, every other byte is `%XX`
//! (two upper-case hex digits), and an empty level is the token `%`
//! alone. A filter maps `+` to `*`, and a trailing `#`, which also matches
//! its parent level, to two subjects: `a/#` is `wharf.t.a.>` and
//! `wharf.t.a` (`#` alone is `wharf.t.>`: every topic has a level).
//!
//! The codec does no I/O; `Link` (`cluster::link`) uses it both ways.

use std::fmt::Write as _;

/// The subject token between the prefix and the topic's levels: topics
/// live under `{prefix}.t.`, the cluster's own messages under
/// `{prefix}.sys.`.
pub const TOPIC_SPACE: &str = "t";

/// Whether `b` stands for itself in a subject token.
fn plain(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && !matches!(b, b'.' | b'*' | b'>' | b'%')
}

/// Appends one topic level as a subject token.
fn push_level(out: &mut String, level: &str) {
    if level.is_empty() {
        out.push('%');
        return;
    }
    for &b in level.as_bytes() {
        if plain(b) {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The subject a topic is published on under `prefix`
/// (`wharf` and `a/b.c` give `wharf.t.a.b%2Ec`).
pub fn topic_subject(prefix: &str, topic: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 3 + topic.len() + 8);
    out.push_str(prefix);
    out.push('.');
    out.push_str(TOPIC_SPACE);
    for level in topic.split('/') {
        out.push('.');
        push_level(&mut out, level);
    }
    out
}

/// The subjects a node subscribes to for a (valid) filter: one, or two for
/// a filter ending in `/#`, whose parent level matches too. The subjects
/// are disjoint, so a message reaches a node once per filter.
pub fn filter_subjects(prefix: &str, filter: &str) -> Vec<String> {
    let mut out = String::with_capacity(prefix.len() + 3 + filter.len() + 8);
    out.push_str(prefix);
    out.push('.');
    out.push_str(TOPIC_SPACE);
    for level in filter.split('/') {
        match level {
            "#" => {
                // `#` is last (the filter is valid).
                if out.len() == prefix.len() + 1 + TOPIC_SPACE.len() {
                    out.push_str(".>");
                    return vec![out];
                }
                let parent = out.clone();
                out.push_str(".>");
                return vec![out, parent];
            }
            "+" => out.push_str(".*"),
            level => {
                out.push('.');
                push_level(&mut out, level);
            }
        }
    }
    vec![out]
}

/// Why a subject does not name a topic: one that some other NATS client
/// wrote without this escaping. The message is dropped and counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubjectError {
    /// Not under `{prefix}.t.`.
    #[error("the subject is not under the topic space {0:?}")]
    OutsideSpace(String),
    /// A `%` not followed by two hex digits (other than the empty level's
    /// lone `%`).
    #[error("bad escape in subject token {0:?}")]
    BadEscape(String),
    /// The bytes escaped are not UTF-8.
    #[error("the topic is not UTF-8")]
    NotUtf8,
}

/// The topic a subject names, if it is under `{prefix}.t.` and escaped
/// as [`topic_subject`] escapes.
///
/// # Errors
/// [`SubjectError`].
pub fn subject_topic(prefix: &str, subject: &str) -> Result<String, SubjectError> {
    let rest = subject
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.strip_prefix(TOPIC_SPACE))
        .and_then(|r| r.strip_prefix('.'))
        .ok_or_else(|| SubjectError::OutsideSpace(format!("{prefix}.{TOPIC_SPACE}.")))?;
    let mut bytes = Vec::with_capacity(rest.len());
    for (i, token) in rest.split('.').enumerate() {
        if i > 0 {
            bytes.push(b'/');
        }
        if token == "%" {
            continue;
        }
        let t = token.as_bytes();
        let mut j = 0;
        while j < t.len() {
            if t[j] == b'%' {
                let hex = t
                    .get(j + 1..j + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| SubjectError::BadEscape(token.to_owned()))?;
                bytes.push(hex);
                j += 3;
            } else {
                bytes.push(t[j]);
                j += 1;
            }
        }
    }
    String::from_utf8(bytes).map_err(|_| SubjectError::NotUtf8)
}

/// Whether `b` stands for itself in a key of the retained bucket (NATS
/// keys allow `-/_=.` and ASCII letters and digits; `.` separates levels
/// and `=` escapes).
fn key_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'/')
}

fn push_key_level(out: &mut String, level: &str) {
    if level.is_empty() {
        out.push('=');
        return;
    }
    for &b in level.as_bytes() {
        if key_plain(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "={b:02X}");
        }
    }
}

/// A topic's key in the cluster's retained bucket: its levels as
/// dot-separated tokens, bytes other than ASCII letters, digits, `-` and
/// `_` as `=XX`, an empty level as `=` (`a/b.c` is `a.b=2Ec`).
pub fn retained_key(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len() + 8);
    for (i, level) in topic.split('/').enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_key_level(&mut out, level);
    }
    out
}

/// The key patterns of a (valid) filter in the retained bucket, as
/// [`filter_subjects`] gives subjects: `a/#` is `a.>` and `a`.
pub fn filter_keys(filter: &str) -> Vec<String> {
    let mut out = String::with_capacity(filter.len() + 8);
    for (i, level) in filter.split('/').enumerate() {
        if level == "#" {
            if i == 0 {
                return vec![">".into()];
            }
            let parent = out.clone();
            out.push_str(".>");
            return vec![out, parent];
        }
        if i > 0 {
            out.push('.');
        }
        if level == "+" {
            out.push('*');
        } else {
            push_key_level(&mut out, level);
        }
    }
    vec![out]
}

/// The topic a retained bucket key names.
///
/// # Errors
/// [`SubjectError::BadEscape`] or [`SubjectError::NotUtf8`].
pub fn key_topic(key: &str) -> Result<String, SubjectError> {
    let mut bytes = Vec::with_capacity(key.len());
    for (i, token) in key.split('.').enumerate() {
        if i > 0 {
            bytes.push(b'/');
        }
        if token == "=" {
            continue;
        }
        let t = token.as_bytes();
        let mut j = 0;
        while j < t.len() {
            if t[j] == b'=' {
                let hex = t
                    .get(j + 1..j + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| SubjectError::BadEscape(token.to_owned()))?;
                bytes.push(hex);
                j += 3;
            } else {
                bytes.push(t[j]);
                j += 1;
            }
        }
    }
    String::from_utf8(bytes).map_err(|_| SubjectError::NotUtf8)
}

pub use crate::config::valid_prefix;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// NATS's own matching of a subscription subject against a published
    /// subject, token by token: the reference the mapping is checked
    /// against.
    fn nats_matches(pattern: &str, subject: &str) -> bool {
        let mut p = pattern.split('.');
        let mut s = subject.split('.');
        loop {
            match (p.next(), s.next()) {
                (Some(">"), Some(_)) => return true,
                (Some("*"), Some(_)) => {}
                (Some(a), Some(b)) if a == b => {}
                (None, None) => return true,
                _ => return false,
            }
        }
    }

    #[test]
    fn examples() {
        assert_eq!(topic_subject("wharf", "a/b"), "wharf.t.a.b");
        assert_eq!(topic_subject("w", "a.b/*/>/%"), "w.t.a%2Eb.%2A.%3E.%25");
        assert_eq!(topic_subject("w", "/x//"), "w.t.%.x.%.%");
        assert_eq!(topic_subject("w", "sp ace/é"), "w.t.sp%20ace.%C3%A9");
        assert_eq!(filter_subjects("w", "a/+/c"), ["w.t.a.*.c"]);
        assert_eq!(filter_subjects("w", "a/#"), ["w.t.a.>", "w.t.a"]);
        assert_eq!(filter_subjects("w", "#"), ["w.t.>"]);
        assert_eq!(filter_subjects("w", "+/#"), ["w.t.*.>", "w.t.*"]);
        assert_eq!(subject_topic("w", "w.t.%.x.%.%").unwrap(), "/x//");
        assert!(subject_topic("w", "w.q.a").is_err());
        assert!(subject_topic("w", "w.t.a%2").is_err());
        assert!(subject_topic("w", "w.t.a%ZZ").is_err());
        assert_eq!(subject_topic("w", "w.t.%FF"), Err(SubjectError::NotUtf8));
        assert_eq!(retained_key("a/b.c//é"), "a.b=2Ec.=.=C3=A9");
        assert_eq!(filter_keys("a/+/#"), ["a.*.>", "a.*"]);
        assert_eq!(filter_keys("#"), [">"]);
        assert!(valid_prefix("wharf.prod"));
        assert!(!valid_prefix("wharf..prod"));
        assert!(!valid_prefix("wharf.*"));
        assert!(!valid_prefix("a b"));
    }

    fn level() -> impl Strategy<Value = String> {
        // Every kind of level: empty, plain, reserved and non-ASCII.
        prop_oneof![
            Just(String::new()),
            "[a-z0-9]{1,6}",
            "[ .*>%$a\u{e9}\u{1F600}\t]{1,5}",
        ]
    }

    fn topic() -> impl Strategy<Value = String> {
        prop::collection::vec(level(), 1..6).prop_map(|l| l.join("/"))
    }

    fn filter() -> impl Strategy<Value = String> {
        (
            prop::collection::vec(prop_oneof![level(), Just("+".to_owned())], 0..5),
            any::<bool>(),
        )
            .prop_filter_map("a filter has a level", |(mut levels, hash)| {
                if hash {
                    levels.push("#".into());
                }
                (!levels.is_empty()).then(|| levels.join("/"))
            })
    }

    proptest! {
        #[test]
        fn topics_round_trip(t in topic()) {
            let s = topic_subject("wharf.x", &t);
            prop_assert!(!s.contains(char::is_whitespace), "{}", s);
            prop_assert!(s.split('.').all(|tok| !tok.is_empty() && tok != "*" && tok != ">"), "{}", s);
            prop_assert_eq!(subject_topic("wharf.x", &s).unwrap(), t);
        }

        #[test]
        fn retained_keys_round_trip(t in topic()) {
            let k = retained_key(&t);
            prop_assert!(k.split('.').all(|tok| !tok.is_empty()
                && tok.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_/=".contains(&b))), "{}", k);
            prop_assert_eq!(key_topic(&k).unwrap(), t);
        }

        #[test]
        fn a_filter_s_key_patterns_find_exactly_its_topics(f in filter(), t in topic()) {
            let k = retained_key(&t);
            let found = filter_keys(&f).iter().filter(|p| nats_matches(p, &k)).count();
            prop_assert_eq!(found, usize::from(crate::routing::matches_levels(&f, &t)), "{} {} {}", f, t, k);
        }

        #[test]
        fn a_node_hears_a_topic_once_per_matching_filter(f in filter(), t in topic()) {
            // `+` and `#` are not in generated levels, so every topic is
            // valid; the `$` rule is applied by the receiving node, not
            // by subjects.
            let subject = topic_subject("w", &t);
            let heard = filter_subjects("w", &f)
                .iter()
                .filter(|p| nats_matches(p, &subject))
                .count();
            let wanted = crate::routing::matches_levels(&f, &t);
            prop_assert_eq!(heard, usize::from(wanted), "{} {} {}", f, t, subject);
        }
    }
}
