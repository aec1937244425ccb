//! `[[rules]]` as written in config.toml, and their compilation into
//! [`Rule`]s. Every error names the rule and the field at fault
//! (`rules[2] (orders).then[1].forward.urls`).

use std::time::Duration;

use toml::Value;

use super::Rule;
use super::action::{Action, Template};
use super::forward::{Forward, ForwardSpec, MethodChoice};
use super::matcher::{Bounds, JsonTest, TextTest, When, wildcards};
use crate::broker::Ingress;
use crate::config::ConfigError;
pub use crate::config::RuleDecl;
use crate::routing::TopicLimits;

/// Longest regular expression source accepted, and the compiled size
/// bound: a rule cannot make the broker build a huge automaton.
const MAX_REGEX: usize = 1024;
const REGEX_SIZE: usize = 1 << 20;

/// Compiles `[[rules]]`.
///
/// # Errors
/// The first invalid rule, naming it and the field.
pub fn compile(decls: &[RuleDecl]) -> Result<Vec<Rule>, ConfigError> {
    let mut out: Vec<Rule> = Vec::with_capacity(decls.len());
    for (i, d) in decls.iter().enumerate() {
        let at = if d.name.is_empty() {
            format!("rules[{i}]")
        } else {
            format!("rules[{i}] ({})", d.name)
        };
        let err = |field: &str, reason: String| ConfigError::Invalid {
            key: format!("{at}.{field}"),
            reason,
        };
        if d.name.is_empty() {
            return Err(err("name", "must not be empty".into()));
        }
        if out.iter().any(|r| r.name == d.name) {
            return Err(err("name", "another rule has this name".into()));
        }
        let when = match &d.when {
            None => When::Always,
            Some(v) => matcher(v, "when").map_err(|(f, r)| err(&f, r))?,
        };
        let mut filters = Vec::new();
        when.filters(&mut filters);
        let captures = filters.iter().map(|f| wildcards(f)).min().unwrap_or(0);
        if d.then.is_empty() {
            return Err(err("then", "must have at least one action".into()));
        }
        let mut then = Vec::with_capacity(d.then.len());
        for (k, a) in d.then.iter().enumerate() {
            let field = format!("then[{k}]");
            let a = action(a, &field, captures).map_err(|(f, r)| err(&f, r))?;
            then.push(a);
        }
        out.push(Rule {
            name: d.name.clone(),
            when,
            then,
        });
    }
    Ok(out)
}

type Failed = (String, String);

fn fail<T>(field: &str, reason: impl Into<String>) -> Result<T, Failed> {
    Err((field.to_owned(), reason.into()))
}

fn table<'v>(v: &'v Value, field: &str) -> Result<&'v toml::Table, Failed> {
    v.as_table()
        .map_or_else(|| fail(field, "must be a table"), Ok)
}

fn string<'v>(v: &'v Value, field: &str) -> Result<&'v str, Failed> {
    v.as_str()
        .map_or_else(|| fail(field, "must be a string"), Ok)
}

fn strings(v: &Value, field: &str) -> Result<Vec<String>, Failed> {
    let Some(items) = v.as_array() else {
        return fail(field, "must be an array of strings");
    };
    items
        .iter()
        .enumerate()
        .map(|(i, s)| string(s, &format!("{field}[{i}]")).map(str::to_owned))
        .collect()
}

fn number(v: &Value, field: &str) -> Result<f64, Failed> {
    match v {
        Value::Integer(i) => Ok(*i as f64),
        Value::Float(f) => Ok(*f),
        _ => fail(field, "must be a number"),
    }
}

fn uint(v: &Value, field: &str, max: u64) -> Result<u64, Failed> {
    match v.as_integer() {
        Some(i) if i >= 0 && (i as u64) <= max => Ok(i as u64),
        _ => fail(field, format!("must be an integer from 0 to {max}")),
    }
}

fn regex(v: &Value, field: &str) -> Result<regex::Regex, Failed> {
    let src = string(v, field)?;
    if src.len() > MAX_REGEX {
        return fail(field, format!("longer than {MAX_REGEX} bytes"));
    }
    regex::RegexBuilder::new(src)
        .size_limit(REGEX_SIZE)
        .build()
        .or_else(|e| fail(field, format!("not a regular expression: {e}")))
}

/// Checks that `t` has only the keys in `allowed`.
fn only(t: &toml::Table, allowed: &[&str], field: &str) -> Result<(), Failed> {
    match t.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => fail(
            &format!("{field}.{k}"),
            format!("unknown key here (expected one of: {})", allowed.join(", ")),
        ),
        None => Ok(()),
    }
}

/// The keys that test a text value.
const TEXT_OPS: &[&str] = &["equals", "one_of", "regex", "exists"];

/// The one key of `t` among `among`: its name, value and field path.
fn the_one<'t>(
    t: &'t toml::Table,
    among: &[&str],
    field: &str,
) -> Result<(&'t str, &'t Value, String), Failed> {
    let found: Vec<&String> = t.keys().filter(|k| among.contains(&k.as_str())).collect();
    let [key] = found.as_slice() else {
        let mut reason = format!("needs exactly one of: {}", among.join(", "));
        // None of them: a misspelt key is the likely cause, so name it.
        if let (true, Some(k)) = (found.is_empty(), t.keys().next()) {
            reason = format!("unknown key `{k}`: {reason}");
            if let Some(near) = among.iter().find(|a| near_miss(k, a)) {
                reason.push_str(&format!(" (did you mean `{near}`?)"));
            }
        }
        return fail(field, reason);
    };
    Ok((key.as_str(), &t[key.as_str()], format!("{field}.{key}")))
}

/// Whether `typed` is `known` with one letter dropped, added, changed or
/// two neighbours swapped: the misspellings worth a suggestion.
fn near_miss(typed: &str, known: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (typed.chars().collect(), known.chars().collect());
    if a == b || a.len().abs_diff(b.len()) > 1 {
        return false;
    }
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let (ra, rb) = (&a[head..], &b[head..]);
    let tail = |x: &[char], y: &[char]| x == y;
    match ra.len().cmp(&rb.len()) {
        std::cmp::Ordering::Less => tail(ra, &rb[1..]),
        std::cmp::Ordering::Greater => tail(&ra[1..], rb),
        std::cmp::Ordering::Equal => {
            tail(&ra[1..], &rb[1..])
                || (ra.len() >= 2 && ra[0] == rb[1] && ra[1] == rb[0] && tail(&ra[2..], &rb[2..]))
        }
    }
}

/// `exists = true` (absence is `not`).
fn exists(v: &Value, field: &str) -> Result<(), Failed> {
    match v.as_bool() {
        Some(true) => Ok(()),
        _ => fail(field, "must be true (use `not` for absence)"),
    }
}

/// The test of `{ header = "x", equals = ... }`'s other keys.
fn text_ops(t: &toml::Table, field: &str) -> Result<TextTest, Failed> {
    let (op, v, f) = the_one(t, TEXT_OPS, field)?;
    Ok(match op {
        "equals" => TextTest::Equals(string(v, &f)?.to_owned()),
        "one_of" => TextTest::OneOf(strings(v, &f)?),
        "regex" => TextTest::Regex(regex(v, &f)?),
        _ => {
            exists(v, &f)?;
            TextTest::Exists
        }
    })
}

/// `client_id = "x"`, `= ["x", "y"]` or `= { regex = "..." }`.
fn text_test(v: &Value, field: &str) -> Result<TextTest, Failed> {
    match v {
        Value::String(s) => Ok(TextTest::Equals(s.clone())),
        Value::Array(_) => Ok(TextTest::OneOf(strings(v, field)?)),
        Value::Table(t) => {
            only(t, TEXT_OPS, field)?;
            text_ops(t, field)
        }
        _ => fail(field, "must be a string, an array of strings or a table"),
    }
}

fn bounds(t: &toml::Table, field: &str) -> Result<Bounds, Failed> {
    let get = |k: &str| {
        t.get(k)
            .map(|v| number(v, &format!("{field}.{k}")))
            .transpose()
    };
    let b = Bounds {
        gt: get("gt")?,
        ge: get("ge")?,
        lt: get("lt")?,
        le: get("le")?,
    };
    if b.is_empty() {
        return fail(field, "needs at least one of gt, ge, lt, le");
    }
    Ok(b)
}

fn toml_to_json(v: &Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

const MATCHERS: &[&str] = &[
    "all",
    "any",
    "not",
    "topic",
    "header",
    "json",
    "payload_size",
    "client_id",
    "principal",
    "protocol",
];

fn matcher(v: &Value, field: &str) -> Result<When, Failed> {
    let t = table(v, field)?;
    let (kind, v, f) = the_one(t, MATCHERS, field)?;
    let leaf_only = |allowed: &[&str]| only(t, allowed, field);
    Ok(match kind {
        "all" | "any" => {
            leaf_only(&[kind])?;
            let Some(items) = v.as_array().filter(|a| !a.is_empty()) else {
                return fail(&f, "must be a non-empty array of matchers");
            };
            let children = items
                .iter()
                .enumerate()
                .map(|(i, c)| matcher(c, &format!("{f}[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            if kind == "all" {
                When::All(children)
            } else {
                When::Any(children)
            }
        }
        "not" => {
            leaf_only(&["not"])?;
            When::not(matcher(v, &f)?)
        }
        "topic" => {
            leaf_only(&["topic"])?;
            let filter = string(v, &f)?;
            if let Err(e) = TopicLimits::WIDEST.check_filter(filter) {
                return fail(&f, format!("not a topic filter: {e}"));
            }
            When::topic(filter)
        }
        "header" => {
            leaf_only(&["header", "equals", "one_of", "regex", "exists"])?;
            let name = string(v, &f)?;
            if name.is_empty() {
                return fail(&f, "must not be empty");
            }
            When::Header(name.to_owned(), text_ops(t, field)?)
        }
        "json" => {
            leaf_only(&[
                "json", "equals", "one_of", "regex", "exists", "gt", "ge", "lt", "le",
            ])?;
            let path: Vec<String> = string(v, &f)?.split('.').map(str::to_owned).collect();
            if path.iter().any(String::is_empty) {
                return fail(&f, "must be a dotted path of keys (`order.items.0.sku`)");
            }
            let numeric = ["gt", "ge", "lt", "le"].iter().any(|k| t.contains_key(*k));
            let test = if numeric {
                if t.keys().any(|k| TEXT_OPS.contains(&k.as_str())) {
                    return fail(
                        field,
                        "numeric bounds cannot be mixed with equals, one_of, regex or exists",
                    );
                }
                JsonTest::Number(bounds(t, field)?)
            } else {
                let (op, ov, of) = the_one(t, TEXT_OPS, field).or_else(|_| {
                    fail(
                        field,
                        "needs one of equals, one_of, regex, exists, or bounds (gt, ge, lt, le)",
                    )
                })?;
                match op {
                    "equals" => JsonTest::Equals(toml_to_json(ov)),
                    "one_of" => match ov.as_array() {
                        Some(a) => JsonTest::OneOf(a.iter().map(toml_to_json).collect()),
                        None => return fail(&of, "must be an array"),
                    },
                    "regex" => JsonTest::Regex(regex(ov, &of)?),
                    _ => {
                        exists(ov, &of)?;
                        JsonTest::Exists
                    }
                }
            };
            When::Json(path, test)
        }
        "payload_size" => {
            leaf_only(&["payload_size"])?;
            let b = table(v, &f)?;
            only(b, &["gt", "ge", "lt", "le"], &f)?;
            When::PayloadSize(bounds(b, &f)?)
        }
        "client_id" => {
            leaf_only(&["client_id"])?;
            When::ClientId(text_test(v, &f)?)
        }
        "principal" => {
            leaf_only(&["principal"])?;
            When::Principal(text_test(v, &f)?)
        }
        _ => {
            leaf_only(&["protocol"])?;
            let names = match v {
                Value::String(s) => vec![s.clone()],
                _ => strings(v, &f)?,
            };
            let set = names
                .iter()
                .map(|n| {
                    Ingress::parse(n).map_or_else(
                        || {
                            fail(
                                &f,
                                format!("unknown protocol {n:?} (native, mqtt, http, embedded or socket)"),
                            )
                        },
                        Ok,
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            When::Protocol(set)
        }
    })
}

const ACTIONS: &[&str] = &[
    "republish",
    "enqueue",
    "set_header",
    "remove_header",
    "drop",
    "dead_letter",
    "forward",
    "stop",
];

fn template(v: &Value, field: &str, captures: usize) -> Result<Template, Failed> {
    let t = Template::parse(string(v, field)?).or_else(|e| fail(field, e))?;
    if t.max_capture() > captures {
        return fail(
            field,
            format!(
                "refers to capture {{{}}} but the rule's topic filter has {captures} wildcard(s)",
                t.max_capture()
            ),
        );
    }
    Ok(t)
}

/// A name (topic or queue) template: a literal one must be a valid name.
fn name_template(v: &Value, field: &str, captures: usize) -> Result<Template, Failed> {
    let t = template(v, field, captures)?;
    if let Some(name) = t.literal()
        && let Err(e) = TopicLimits::WIDEST.check_topic(name)
    {
        return fail(field, format!("not a valid name: {e}"));
    }
    Ok(t)
}

fn flag(t: &toml::Table, key: &str, field: &str) -> Result<(), Failed> {
    match t[key].as_bool() {
        Some(true) => Ok(()),
        _ => fail(&format!("{field}.{key}"), "must be true"),
    }
}

fn action(v: &Value, field: &str, captures: usize) -> Result<Action, Failed> {
    let t = table(v, field)?;
    let (kind, v, f) = the_one(t, ACTIONS, field)?;
    Ok(match kind {
        "republish" => {
            only(t, &["republish", "retain"], field)?;
            let retain = match t.get("retain") {
                None => false,
                Some(r) => r.as_bool().map_or_else(
                    || fail(&format!("{field}.retain"), "must be true or false"),
                    Ok,
                )?,
            };
            Action::Republish {
                topic: name_template(v, &f, captures)?,
                retain,
            }
        }
        "enqueue" => {
            only(t, &["enqueue", "priority", "ttl_ms"], field)?;
            Action::Enqueue {
                queue: name_template(v, &f, captures)?,
                priority: t
                    .get("priority")
                    .map(|p| uint(p, &format!("{field}.priority"), 9))
                    .transpose()?
                    .unwrap_or(0) as u8,
                ttl_ms: t
                    .get("ttl_ms")
                    .map(|p| uint(p, &format!("{field}.ttl_ms"), u64::MAX >> 1))
                    .transpose()?,
            }
        }
        "set_header" => {
            only(t, &["set_header", "value"], field)?;
            let name = string(v, &f)?;
            if name.is_empty() {
                return fail(&f, "must not be empty");
            }
            let Some(value) = t.get("value") else {
                return fail(&format!("{field}.value"), "missing: the header's value");
            };
            Action::SetHeader(
                name.to_owned(),
                template(value, &format!("{field}.value"), captures)?,
            )
        }
        "remove_header" => {
            only(t, &["remove_header"], field)?;
            Action::RemoveHeader(string(v, &f)?.to_owned())
        }
        "drop" => {
            only(t, &["drop"], field)?;
            flag(t, "drop", field)?;
            Action::Drop
        }
        "stop" => {
            only(t, &["stop"], field)?;
            flag(t, "stop", field)?;
            Action::Stop
        }
        "dead_letter" => {
            only(t, &["dead_letter"], field)?;
            let q = string(v, &f)?;
            if let Err(e) = TopicLimits::WIDEST.check_topic(q) {
                return fail(&f, format!("not a valid queue name: {e}"));
            }
            Action::DeadLetter(q.to_owned())
        }
        _ => {
            only(t, &["forward"], field)?;
            Action::Forward(std::sync::Arc::new(Forward::new(forward(v, &f)?)))
        }
    })
}

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

fn method(v: &Value, field: &str) -> Result<String, Failed> {
    let m = string(v, field)?.to_ascii_uppercase();
    if !METHODS.contains(&m.as_str()) {
        return fail(field, format!("must be one of {}", METHODS.join(", ")));
    }
    Ok(m)
}

fn forward(v: &Value, field: &str) -> Result<ForwardSpec, Failed> {
    let t = table(v, field)?;
    only(
        t,
        &[
            "urls",
            "method",
            "method_from",
            "methods",
            "headers",
            "timeout_ms",
            "retries",
            "backoff_ms",
            "fail_after",
            "skip_s",
            "dead_letter",
            "in_flight",
            "buffer",
        ],
        field,
    )?;
    let sub = |k: &str| format!("{field}.{k}");
    let mut spec = ForwardSpec::default();
    let Some(urls) = t.get("urls") else {
        return fail(&sub("urls"), "missing: the backends' URLs");
    };
    spec.urls = strings(urls, &sub("urls"))?;
    if spec.urls.is_empty() {
        return fail(&sub("urls"), "must list at least one URL");
    }
    for (i, u) in spec.urls.iter().enumerate() {
        let ok = u.parse::<awc::http::Uri>().ok().filter(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
        });
        if ok.is_none() {
            return fail(
                &format!("{}[{i}]", sub("urls")),
                "must be an http:// or https:// URL",
            );
        }
    }
    spec.method = match (t.get("method"), t.get("method_from")) {
        (_, Some(from)) => {
            let path: Vec<String> = string(from, &sub("method_from"))?
                .split('.')
                .map(str::to_owned)
                .collect();
            if path.iter().any(String::is_empty) {
                return fail(&sub("method_from"), "must be a dotted path of keys");
            }
            let Some(map) = t.get("methods").and_then(Value::as_table) else {
                return fail(
                    &sub("methods"),
                    "missing: a table of field value -> method (`add = \"POST\"`)",
                );
            };
            let map = map
                .iter()
                .map(|(k, m)| Ok((k.clone(), method(m, &format!("{}.{k}", sub("methods")))?)))
                .collect::<Result<Vec<_>, Failed>>()?;
            let default = t
                .get("method")
                .map(|m| method(m, &sub("method")))
                .transpose()?;
            MethodChoice::FromField { path, map, default }
        }
        (Some(m), None) => MethodChoice::Fixed(method(m, &sub("method"))?),
        (None, None) => MethodChoice::Fixed("POST".into()),
    };
    if t.contains_key("methods") && !t.contains_key("method_from") {
        return fail(
            &sub("methods"),
            "needs method_from (the payload field that picks the method)",
        );
    }
    if let Some(h) = t.get("headers") {
        spec.headers = Some(strings(h, &sub("headers"))?);
    }
    let ms = |k: &str, max: u64| t.get(k).map(|v| uint(v, &sub(k), max)).transpose();
    if let Some(v) = ms("timeout_ms", 600_000)? {
        if v == 0 {
            return fail(&sub("timeout_ms"), "must be at least 1");
        }
        spec.timeout = Duration::from_millis(v);
    }
    if let Some(v) = ms("retries", 100)? {
        spec.retries = v as u32;
    }
    if let Some(v) = ms("backoff_ms", 600_000)? {
        spec.backoff = Duration::from_millis(v);
    }
    if let Some(v) = ms("fail_after", 1000)? {
        spec.fail_after = (v as u32).max(1);
    }
    if let Some(v) = ms("skip_s", 86_400)? {
        spec.skip = Duration::from_secs(v);
    }
    if let Some(v) = ms("in_flight", 64)? {
        if v == 0 {
            return fail(&sub("in_flight"), "must be at least 1");
        }
        spec.in_flight = v as usize;
    }
    if let Some(v) = ms("buffer", 1_000_000)? {
        if (v as usize) < spec.in_flight {
            return fail(&sub("buffer"), "must be at least in_flight");
        }
        spec.buffer = v as usize;
    }
    if let Some(q) = t.get("dead_letter") {
        let q = string(q, &sub("dead_letter"))?;
        if let Err(e) = TopicLimits::WIDEST.check_topic(q) {
            return fail(&sub("dead_letter"), format!("not a valid queue name: {e}"));
        }
        spec.dead_letter = Some(q.to_owned());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn rules(text: &str) -> Result<Vec<Rule>, String> {
        #[derive(Deserialize)]
        struct Doc {
            rules: Vec<RuleDecl>,
        }
        let doc: Doc = toml::from_str(text).map_err(|e| e.to_string())?;
        compile(&doc.rules).map_err(|e| e.to_string())
    }

    #[test]
    fn a_full_rule_compiles() {
        let r = rules(
            r#"
            [[rules]]
            name = "orders"
            when = { all = [
                { topic = "tenants/+/orders/#" },
                { any = [ { header = "kind", equals = "order" }, { json = "qty", gt = 0 } ] },
                { not = { client_id = { regex = "^test-" } } },
                { protocol = ["mqtt", "native"] },
                { payload_size = { le = 65536 } },
            ] }
            then = [
                { set_header = "tenant", value = "{1}" },
                { republish = "orders/{1}/{2}", retain = true },
                { enqueue = "orders-{1}", priority = 5, ttl_ms = 60000 },
                { forward = { urls = ["http://127.0.0.1:9/a"], method_from = "action", methods = { add = "POST", update = "put" }, dead_letter = "fwd-dlq" } },
                { stop = true },
            ]
            "#,
        )
        .unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].then.len(), 5);
    }

    #[test]
    fn the_readme_example_compiles() {
        let readme = include_str!("../../README.md");
        let (_, rest) = readme
            .split_once("<!-- rules example: compiled by a test -->\n```toml\n")
            .unwrap();
        let (block, _) = rest.split_once("```").unwrap();
        let config = crate::config::Config::from_toml(block).unwrap();
        config.validate().unwrap();
        assert_eq!(compile(&config.rules).unwrap().len(), 2);
    }

    #[test]
    fn errors_name_the_rule_and_the_field() {
        let cases = [
            (
                r#"when = { topic = "a/#/b" }
                then = [{ drop = true }]"#,
                "rules[0] (r).when.topic",
            ),
            (
                r#"when = { all = [ { header = "h", regex = "(" } ] }
                then = [{ drop = true }]"#,
                "rules[0] (r).when.all[0].regex",
            ),
            (
                r#"when = { topic = "a/+" }
                then = [{ republish = "b/{2}" }]"#,
                "rules[0] (r).then[0].republish",
            ),
            (
                r#"then = [{ forward = { urls = ["ftp://x"] } }]"#,
                "rules[0] (r).then[0].forward.urls[0]",
            ),
            (
                r#"then = [{ enqueue = "q", priority = 10 }]"#,
                "rules[0] (r).then[0].priority",
            ),
            (r#"then = [{ shout = true }]"#, "rules[0] (r).then[0]"),
            (
                r#"when = { topic = "a", header = "x" }
                then = [{ drop = true }]"#,
                "rules[0] (r).when",
            ),
            (r#"then = []"#, "rules[0] (r).then"),
            (
                r#"when = { json = "a", gt = 1, equals = 2 }
                then = [{ drop = true }]"#,
                "rules[0] (r).when",
            ),
            (
                r#"when = { protocol = "smtp" }
                then = [{ drop = true }]"#,
                "rules[0] (r).when.protocol",
            ),
        ];
        for (body, key) in cases {
            let text = format!("[[rules]]\nname = \"r\"\n{body}\n");
            let e = rules(&text).unwrap_err();
            assert!(e.starts_with(&format!("{key}:")), "{body}\n -> {e}");
        }
        let dup = "[[rules]]\nname = \"r\"\nthen = [{ drop = true }]\n".repeat(2);
        assert!(rules(&dup).unwrap_err().starts_with("rules[1] (r).name:"));
    }

    #[test]
    fn a_misspelt_key_is_named_with_its_likely_spelling() {
        let e = rules("[[rules]]\nname = \"r\"\nthen = [{ republsh = \"b\" }]\n").unwrap_err();
        assert!(
            e.starts_with("rules[0] (r).then[0]: unknown key `republsh`")
                && e.contains("did you mean `republish`?"),
            "{e}"
        );
        let e =
            rules("[[rules]]\nname = \"r\"\nwhen = { topc = \"a\" }\nthen = [{ drop = true }]\n")
                .unwrap_err();
        assert!(
            e.contains("unknown key `topc`") && e.contains("`topic`?"),
            "{e}"
        );
        // Nothing close: named, no guess.
        let e = rules("[[rules]]\nname = \"r\"\nthen = [{ shout = true }]\n").unwrap_err();
        assert!(
            e.contains("unknown key `shout`") && !e.contains("did you mean"),
            "{e}"
        );
        for (typed, known, near) in [
            ("republsh", "republish", true),
            ("republishh", "republish", true),
            ("repbulish", "republish", true),
            ("republixh", "republish", true),
            ("drop", "drop", false),
            ("dorp", "drop", true),
            ("forwarded", "forward", false),
            ("x", "stop", false),
        ] {
            assert_eq!(near_miss(typed, known), near, "{typed} / {known}");
        }
    }
}
