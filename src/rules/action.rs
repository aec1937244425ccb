//! The `then` of a rule: an ordered chain of actions over the message.
//! Header edits change the message for the actions and rules after them
//! and for its own topic; republish, enqueue and forward send a copy as
//! it is at that point.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::forward::Forward;

/// Text with placeholders, filled per message: `{1}`, `{2}`... are the
/// captures of the rule's topic filter (one per `+`, the rest of the
/// topic for `#`), `{topic}` the topic, `{client_id}` and `{principal}`
/// the publisher's (empty when there is none). `{{` and `}}` are braces.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Capture(usize),
    Topic,
    ClientId,
    Principal,
}

/// What a template is filled from.
pub(super) struct Fill<'a> {
    pub captures: &'a [&'a str],
    pub topic: &'a str,
    pub client_id: &'a str,
    pub principal: &'a str,
}

impl Template {
    /// Parses `text`.
    ///
    /// # Errors
    /// An unknown placeholder or an unclosed brace.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    lit.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    lit.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(format!("unclosed {{ in {text:?}")),
                        }
                    }
                    let part = match name.as_str() {
                        "topic" => Part::Topic,
                        "client_id" => Part::ClientId,
                        "principal" => Part::Principal,
                        n => match n.parse::<usize>() {
                            Ok(i) if i >= 1 => Part::Capture(i),
                            _ => {
                                return Err(format!(
                                    "unknown placeholder {{{name}}} (use {{1}}, {{2}}..., {{topic}}, {{client_id}} or {{principal}})"
                                ));
                            }
                        },
                    };
                    if !lit.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut lit)));
                    }
                    parts.push(part);
                }
                '}' => return Err(format!("unmatched }} in {text:?} (write }}}} for a brace)")),
                c => lit.push(c),
            }
        }
        if !lit.is_empty() {
            parts.push(Part::Text(lit));
        }
        Ok(Template { parts })
    }

    /// The highest capture it refers to (0 for none).
    pub fn max_capture(&self) -> usize {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Capture(i) => Some(*i),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Whether it has no placeholder.
    pub fn literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Text(t)] => Some(t),
            _ => None,
        }
    }

    pub(super) fn render(&self, fill: &Fill<'_>) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Capture(i) => out.push_str(fill.captures.get(i - 1).copied().unwrap_or("")),
                Part::Topic => out.push_str(fill.topic),
                Part::ClientId => out.push_str(fill.client_id),
                Part::Principal => out.push_str(fill.principal),
            }
        }
        out
    }
}

impl std::fmt::Display for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for p in &self.parts {
            match p {
                Part::Text(t) => f.write_str(&t.replace('{', "{{").replace('}', "}}"))?,
                Part::Capture(i) => write!(f, "{{{i}}}")?,
                Part::Topic => f.write_str("{topic}")?,
                Part::ClientId => f.write_str("{client_id}")?,
                Part::Principal => f.write_str("{principal}")?,
            }
        }
        Ok(())
    }
}

/// One step of a rule's chain.
#[derive(Debug, Clone)]
pub enum Action {
    /// Publishes a copy to another topic (which rules see too, up to a
    /// depth of [`super::MAX_DEPTH`]).
    Republish {
        /// The topic.
        topic: Template,
        /// Whether the copy is retained.
        retain: bool,
    },
    /// Puts a copy on a queue.
    Enqueue {
        /// The queue.
        queue: Template,
        /// Its priority (0-9).
        priority: u8,
        /// Its time to live, if any.
        ttl_ms: Option<u64>,
    },
    /// Sets a header.
    SetHeader(String, Template),
    /// Removes a header.
    RemoveHeader(String),
    /// The message is not published to its own topic (later actions and
    /// rules still run).
    Drop,
    /// Puts a copy on a queue (with the headers `rule` and
    /// `dead-letter-topic`) and drops the message.
    DeadLetter(String),
    /// Hands a copy to HTTP backends (asynchronously: the publish does
    /// not wait for the backends).
    Forward(Arc<Forward>),
    /// Ends the chain: no later action of this rule and no later rule.
    Stop,
}

impl Action {
    /// Its kind, as `GET /admin/rules` names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Republish { .. } => "republish",
            Action::Enqueue { .. } => "enqueue",
            Action::SetHeader(..) => "set_header",
            Action::RemoveHeader(_) => "remove_header",
            Action::Drop => "drop",
            Action::DeadLetter(_) => "dead_letter",
            Action::Forward(_) => "forward",
            Action::Stop => "stop",
        }
    }

    /// What it does, for `GET /admin/rules`.
    pub fn describe(&self) -> String {
        match self {
            Action::Republish { topic, retain } => {
                format!(
                    "republish to {topic}{}",
                    if *retain { " (retained)" } else { "" }
                )
            }
            Action::Enqueue {
                queue,
                priority,
                ttl_ms,
            } => {
                let ttl = ttl_ms.map(|t| format!(", ttl {t} ms")).unwrap_or_default();
                format!("enqueue to {queue} (priority {priority}{ttl})")
            }
            Action::SetHeader(n, v) => format!("set header {n} = {v}"),
            Action::RemoveHeader(n) => format!("remove header {n}"),
            Action::Drop => "drop".into(),
            Action::DeadLetter(q) => format!("dead-letter to {q}"),
            Action::Forward(f) => f.describe(),
            Action::Stop => "stop".into(),
        }
    }
}

/// An action with its counters.
#[derive(Debug)]
pub(super) struct Step {
    pub action: Action,
    /// Times it ran.
    pub runs: AtomicU64,
    /// Times it failed (a refused republish or enqueue, a full forward
    /// buffer).
    pub failures: AtomicU64,
}

impl Step {
    pub fn new(action: Action) -> Step {
        Step {
            action,
            runs: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        }
    }

    pub fn ran(&self, ok: bool) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        let t = Template::parse("tenants/{1}/orders/{topic}-{client_id}{{x}}").unwrap();
        assert_eq!(t.max_capture(), 1);
        let fill = Fill {
            captures: &["acme"],
            topic: "t",
            client_id: "c",
            principal: "",
        };
        assert_eq!(t.render(&fill), "tenants/acme/orders/t-c{x}");
        assert_eq!(t.to_string(), "tenants/{1}/orders/{topic}-{client_id}{{x}}");
        assert!(Template::parse("a/{0}").is_err());
        assert!(Template::parse("a/{nope}").is_err());
        assert!(Template::parse("a/{1").is_err());
        assert!(Template::parse("a/}").is_err());
        assert_eq!(Template::parse("plain").unwrap().literal(), Some("plain"));
    }
}
