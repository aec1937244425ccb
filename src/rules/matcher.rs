//! The `when` of a rule: a tree of matchers over one published message.
//! `all`, `any` and `not` combine leaves on the topic, headers, payload
//! size, a JSON field of the payload, and who published it and how. An
//! embedding app adds its own leaves with the [`Matcher`] trait.

use std::cell::{Cell, OnceCell};
use std::sync::Arc;

use regex::Regex;
use serde_json::Value;

use crate::broker::{Ingress, Source};
use crate::protocol::frame::Headers;

/// What a matcher sees of one message. The payload is parsed as JSON at
/// most once per message, and only if some matcher asks.
pub struct Context<'a> {
    /// The topic it was published to.
    pub topic: &'a str,
    /// Its payload.
    pub payload: &'a [u8],
    /// Its headers, as earlier rules left them.
    pub headers: &'a Headers,
    /// Who published it, and how.
    pub source: &'a Source<'a>,
    json: &'a OnceCell<Option<Value>>,
    /// The first topic filter on the path of the tree that matched (its
    /// wildcards are the captures `{1}`, `{2}`...): branches that fail,
    /// and `not`, leave it as it was.
    pub(super) matched: Cell<Option<&'a str>>,
}

impl<'a> Context<'a> {
    pub(super) fn new(
        topic: &'a str,
        payload: &'a [u8],
        headers: &'a Headers,
        source: &'a Source<'a>,
        json: &'a OnceCell<Option<Value>>,
    ) -> Self {
        Context {
            topic,
            payload,
            headers,
            source,
            json,
            matched: Cell::new(None),
        }
    }

    /// The payload as JSON, or `None` when it is not JSON (parsed once).
    pub fn json(&self) -> Option<&'a Value> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.payload).ok())
            .as_ref()
    }
}

/// A matcher kind of the embedding app's own, for leaves the built-in
/// ones do not cover (the seed's matchers are extended by subclassing;
/// here by implementing this trait). Used as [`When::custom`].
pub trait Matcher: Send + Sync + 'static {
    /// Whether the message matches.
    fn matches(&self, cx: &Context<'_>) -> bool;
    /// A short description for `GET /admin/rules`.
    fn describe(&self) -> String;
}

/// A test of a text value (a header, the client id, the principal).
#[derive(Debug, Clone)]
pub enum TextTest {
    /// Equal to this.
    Equals(String),
    /// Equal to one of these.
    OneOf(Vec<String>),
    /// Matched by this regular expression (anywhere, unless anchored).
    Regex(Regex),
    /// Present at all.
    Exists,
}

impl TextTest {
    fn test(&self, value: Option<&str>) -> bool {
        match (self, value) {
            (_, None) => false,
            (TextTest::Exists, Some(_)) => true,
            (TextTest::Equals(want), Some(v)) => v == want,
            (TextTest::OneOf(set), Some(v)) => set.iter().any(|w| w == v),
            (TextTest::Regex(re), Some(v)) => re.is_match(v),
        }
    }

    fn describe(&self) -> String {
        match self {
            TextTest::Equals(v) => format!("= {v:?}"),
            TextTest::OneOf(set) => format!("in {set:?}"),
            TextTest::Regex(re) => format!("~ /{}/", re.as_str()),
            TextTest::Exists => "exists".into(),
        }
    }
}

/// A numeric comparison (`gt`, `ge`, `lt`, `le`), all of which must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Bounds {
    /// Greater than.
    pub gt: Option<f64>,
    /// Greater than or equal.
    pub ge: Option<f64>,
    /// Less than.
    pub lt: Option<f64>,
    /// Less than or equal.
    pub le: Option<f64>,
}

impl Bounds {
    /// Whether `x` is within every bound given.
    pub fn holds(&self, x: f64) -> bool {
        self.gt.is_none_or(|b| x > b)
            && self.ge.is_none_or(|b| x >= b)
            && self.lt.is_none_or(|b| x < b)
            && self.le.is_none_or(|b| x <= b)
    }

    /// Whether no bound is given.
    pub fn is_empty(&self) -> bool {
        *self == Bounds::default()
    }

    fn describe(&self) -> String {
        let parts = [
            (">", self.gt),
            (">=", self.ge),
            ("<", self.lt),
            ("<=", self.le),
        ];
        parts
            .iter()
            .filter_map(|(op, b)| b.map(|b| format!("{op} {b}")))
            .collect::<Vec<_>>()
            .join(" and ")
    }
}

/// A test of a JSON field of the payload.
#[derive(Debug, Clone)]
pub enum JsonTest {
    /// Equal to this JSON value.
    Equals(Value),
    /// Equal to one of these.
    OneOf(Vec<Value>),
    /// A string matched by this regular expression.
    Regex(Regex),
    /// A number within these bounds.
    Number(Bounds),
    /// Present (even if `null`).
    Exists,
}

/// A node of a rule's matcher tree.
#[derive(Clone)]
pub enum When {
    /// Every message.
    Always,
    /// Every child matches (evaluated in order, stopping at the first
    /// that does not).
    All(Vec<When>),
    /// Some child matches (in order, stopping at the first that does).
    Any(Vec<When>),
    /// The child does not match.
    Not(Box<When>),
    /// The topic matches this filter (`+` and `#` are the captures
    /// `{1}`, `{2}`... of the rule's templates).
    Topic(Arc<str>),
    /// A header passes the test.
    Header(String, TextTest),
    /// The payload's size in bytes is within the bounds.
    PayloadSize(Bounds),
    /// A field of the payload parsed as JSON (a path of object keys and
    /// array indexes) passes the test; a payload that is not JSON never
    /// matches.
    Json(Vec<String>, JsonTest),
    /// The publisher's client id passes the test (HTTP and embedded
    /// publishes have none).
    ClientId(TextTest),
    /// The publisher's principal (user or key name) passes the test.
    Principal(TextTest),
    /// The message came in on one of these ways.
    Protocol(Vec<Ingress>),
    /// A matcher of the app's own.
    Custom(Arc<dyn Matcher>),
}

impl std::fmt::Debug for When {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl When {
    /// The topic leaf: messages on topics matching `filter`.
    pub fn topic(filter: &str) -> When {
        When::Topic(filter.into())
    }

    /// Every one of `children`.
    pub fn all(children: impl IntoIterator<Item = When>) -> When {
        When::All(children.into_iter().collect())
    }

    /// Any one of `children`.
    pub fn any(children: impl IntoIterator<Item = When>) -> When {
        When::Any(children.into_iter().collect())
    }

    /// The opposite of `child`.
    #[allow(clippy::should_implement_trait)]
    pub fn not(child: When) -> When {
        When::Not(Box::new(child))
    }

    /// Header `name` equal to `value`.
    pub fn header(name: &str, value: &str) -> When {
        When::Header(name.into(), TextTest::Equals(value.into()))
    }

    /// A matcher of the app's own.
    pub fn custom(m: impl Matcher) -> When {
        When::Custom(Arc::new(m))
    }

    /// Whether the message matches.
    pub fn matches<'a>(&'a self, cx: &Context<'a>) -> bool {
        match self {
            When::Always => true,
            When::All(c) => {
                let before = cx.matched.get();
                let hit = c.iter().all(|w| w.matches(cx));
                if !hit {
                    cx.matched.set(before);
                }
                hit
            }
            When::Any(c) => c.iter().any(|w| {
                let before = cx.matched.get();
                let hit = w.matches(cx);
                if !hit {
                    cx.matched.set(before);
                }
                hit
            }),
            When::Not(c) => {
                let before = cx.matched.get();
                let hit = c.matches(cx);
                cx.matched.set(before);
                !hit
            }
            When::Topic(f) => {
                let hit = crate::routing::matches(f, cx.topic);
                if hit && cx.matched.get().is_none() {
                    cx.matched.set(Some(f));
                }
                hit
            }
            When::Header(name, test) => test.test(cx.headers.get(name).map(String::as_str)),
            When::PayloadSize(b) => b.holds(cx.payload.len() as f64),
            When::Json(path, test) => {
                let Some(v) = cx.json().and_then(|j| lookup(j, path)) else {
                    return false;
                };
                match test {
                    JsonTest::Exists => true,
                    JsonTest::Equals(want) => v == want,
                    JsonTest::OneOf(set) => set.iter().any(|w| w == v),
                    JsonTest::Regex(re) => v.as_str().is_some_and(|s| re.is_match(s)),
                    JsonTest::Number(b) => v.as_f64().is_some_and(|x| b.holds(x)),
                }
            }
            When::ClientId(test) => test.test(cx.source.client_id),
            When::Principal(test) => test.test(cx.source.principal),
            When::Protocol(set) => set.contains(&cx.source.ingress),
            When::Custom(m) => m.matches(cx),
        }
    }

    /// The filters a message's topic must match for the tree to match
    /// (`None`: any topic may), so that rules are found through the
    /// topic trie instead of being tried one by one.
    pub(super) fn required_filters(&self) -> Option<Vec<Arc<str>>> {
        match self {
            When::Topic(f) => Some(vec![f.clone()]),
            When::All(c) => c.iter().find_map(When::required_filters),
            When::Any(c) if !c.is_empty() => {
                let mut all = Vec::new();
                for w in c {
                    all.extend(w.required_filters()?);
                }
                Some(all)
            }
            _ => None,
        }
    }

    /// Every topic filter that can give the captures (none under `not`),
    /// for checking capture references.
    pub(super) fn filters(&self, out: &mut Vec<Arc<str>>) {
        match self {
            When::Topic(f) => out.push(f.clone()),
            When::All(c) | When::Any(c) => c.iter().for_each(|w| w.filters(out)),
            _ => {}
        }
    }

    /// A one-line description for `GET /admin/rules`.
    pub fn describe(&self) -> String {
        let list = |c: &[When], sep: &str| {
            let parts: Vec<String> = c.iter().map(When::describe).collect();
            format!("({})", parts.join(sep))
        };
        match self {
            When::Always => "always".into(),
            When::All(c) => list(c, " and "),
            When::Any(c) => list(c, " or "),
            When::Not(c) => format!("not {}", c.describe()),
            When::Topic(f) => format!("topic {f}"),
            When::Header(n, t) => format!("header {n} {}", t.describe()),
            When::PayloadSize(b) => format!("payload size {}", b.describe()),
            When::Json(p, t) => {
                let t = match t {
                    JsonTest::Equals(v) => format!("= {v}"),
                    JsonTest::OneOf(s) => format!("in {}", Value::from(s.clone())),
                    JsonTest::Regex(re) => format!("~ /{}/", re.as_str()),
                    JsonTest::Number(b) => b.describe(),
                    JsonTest::Exists => "exists".into(),
                };
                format!("json {} {t}", p.join("."))
            }
            When::ClientId(t) => format!("client_id {}", t.describe()),
            When::Principal(t) => format!("principal {}", t.describe()),
            When::Protocol(set) => {
                let names: Vec<&str> = set.iter().map(|i| i.as_str()).collect();
                format!("protocol in {names:?}")
            }
            When::Custom(m) => m.describe(),
        }
    }
}

/// The value at `path` (object keys; array indexes as numbers).
pub(super) fn lookup<'v>(mut v: &'v Value, path: &[String]) -> Option<&'v Value> {
    for key in path {
        v = match v {
            Value::Object(map) => map.get(key)?,
            Value::Array(items) => items.get(key.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(v)
}

/// The parts of `topic` that the wildcards of `filter` (which matches it)
/// stand for: one per `+`, and the rest of the topic for `#`.
pub fn captures<'t>(filter: &str, topic: &'t str) -> Vec<&'t str> {
    let mut out = Vec::new();
    let mut rest = topic;
    for level in filter.split('/') {
        if level == "#" {
            out.push(rest);
            break;
        }
        let (head, tail) = rest.split_once('/').unwrap_or((rest, ""));
        if level == "+" {
            out.push(head);
        }
        rest = tail;
    }
    out
}

/// How many captures a filter has.
pub(super) fn wildcards(filter: &str) -> usize {
    filter.split('/').filter(|l| *l == "+" || *l == "#").count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> Source<'static> {
        Source {
            ingress: Ingress::Mqtt,
            client_id: Some("dev-1"),
            principal: Some("alice"),
        }
    }

    fn check(w: &When, topic: &str, payload: &str, headers: &[(&str, &str)]) -> bool {
        let headers: Headers = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let json = OnceCell::new();
        let src = source();
        let cx = Context::new(topic, payload.as_bytes(), &headers, &src, &json);
        w.matches(&cx)
    }

    #[test]
    fn trees() {
        let w = When::all([
            When::topic("orders/+/#"),
            When::any([When::header("kind", "a"), When::header("kind", "b")]),
            When::not(When::Json(
                vec!["qty".into()],
                JsonTest::Number(Bounds {
                    le: Some(0.0),
                    ..Bounds::default()
                }),
            )),
        ]);
        assert!(check(&w, "orders/eu/1", r#"{"qty":3}"#, &[("kind", "a")]));
        assert!(!check(&w, "orders/eu/1", r#"{"qty":0}"#, &[("kind", "a")]));
        assert!(!check(&w, "orders/eu/1", r#"{"qty":3}"#, &[("kind", "c")]));
        assert!(!check(&w, "bills/eu/1", r#"{"qty":3}"#, &[("kind", "a")]));
        // Not JSON: the json leaf does not match, so `not` does.
        assert!(check(&w, "orders/eu", "x", &[("kind", "b")]));
    }

    #[test]
    fn leaves() {
        let re = TextTest::Regex(Regex::new("^dev-").unwrap());
        assert!(check(&When::ClientId(re), "t", "", &[]));
        assert!(!check(
            &When::Principal(TextTest::Equals("bob".into())),
            "t",
            "",
            &[]
        ));
        assert!(check(&When::Protocol(vec![Ingress::Mqtt]), "t", "", &[]));
        let size = When::PayloadSize(Bounds {
            ge: Some(2.0),
            lt: Some(4.0),
            ..Bounds::default()
        });
        assert!(check(&size, "t", "abc", &[]));
        assert!(!check(&size, "t", "abcd", &[]));
        let path = When::Json(
            vec!["items".into(), "1".into(), "sku".into()],
            JsonTest::OneOf(vec!["x".into(), "y".into()]),
        );
        assert!(check(
            &path,
            "t",
            r#"{"items":[{"sku":"a"},{"sku":"y"}]}"#,
            &[]
        ));
        assert!(check(
            &When::Header("h".into(), TextTest::Exists),
            "t",
            "",
            &[("h", "")]
        ));
    }

    #[test]
    fn indexing() {
        let w = When::all([When::header("a", "b"), When::topic("x/#")]);
        assert_eq!(w.required_filters(), Some(vec![Arc::from("x/#")]));
        let w = When::any([When::topic("a"), When::header("a", "b")]);
        assert_eq!(w.required_filters(), None);
        let w = When::any([When::topic("a"), When::topic("b/+")]);
        assert_eq!(w.required_filters().map(|v| v.len()), Some(2));
        assert_eq!(When::not(When::topic("a")).required_filters(), None);
    }

    #[test]
    fn capture_parts() {
        assert_eq!(captures("a/+/c/#", "a/b/c/d/e"), vec!["b", "d/e"]);
        assert_eq!(captures("+/+", "x/y"), vec!["x", "y"]);
        assert_eq!(captures("a/#", "a"), vec![""]);
        assert_eq!(wildcards("a/+/#"), 2);
    }
}
