//! Rules: what happens to a published message besides reaching its
//! topic's subscribers. A rule is a matcher tree (`when`) and a chain of
//! actions (`then`): republish with captures, enqueue, edit headers, drop,
//! dead-letter, forward to HTTP backends, stop.
//!
//! Rules run in [`crate::broker::Broker::publish`], on the publishing
//! task, before the topic's task: every way in (native, MQTT, HTTP,
//! embedded, transactions) passes there, the publisher awaits its own
//! message's rules before its next publish (so its order holds through
//! republish and enqueue), and a rule's failure never holds a topic's
//! queue. Rules are found through a [`FilterTrie`] of their topic
//! filters, so rules on other topics cost one trie walk, not one test
//! each. Forwards are queued per rule and sent by lanes of their own
//! (see [`forward`]).
//!
//! # Design notes
//!
//! ## Where rules run, and why there
//! The publish path (`Broker::publish_at`) calls the hook before the
//! topic's task, on the publisher's own task. With no rule loaded that is
//! one relaxed atomic load (`active`). Otherwise the set in force (an
//! `Arc<RuleSet>` under a read lock, cloned once per message and swapped
//! whole by a reload, so a message meets one set from start to end) finds
//! its candidate rules through a `FilterTrie` of the filters each rule
//! requires (the `topic` leaf of its tree, of an `all` branch, or every
//! branch of an `any` of topics), plus the rules that may match any topic.
//! The candidates run in the order written; the payload is parsed as JSON
//! at most once per message, when a leaf asks.
//!
//! Not inside the topic's task: a rule's actions publish, enqueue
//! (awaiting durability) and may republish through the rules again; inside
//! a topic task they would hold that topic's queue for the time of another
//! resource's task, and two topics could wait on each other. Not in a
//! resource of its own: the publisher's task already gives the order
//! wanted at no cost, and rules share no state that would need one (their
//! counters are atomics).
//!
//! ## Order
//! A connection handles its frames one at a time and awaits each publish,
//! and a rule's republishes and enqueues are awaited in chain order before
//! the message goes to its own topic, so every topic and queue a
//! publisher's messages reach sees them in its order. Forwards keep it too
//! (each publisher's messages take one lane) without holding the publish
//! up. A republish carries the original publisher as its source and goes
//! through the rules again, at most `MAX_DEPTH` deep: a rule loop ends in
//! counted failures, not a spin.
//!
//! ## Loading, reloading, stopping
//! `[[rules]]` are `config::RuleDecl`s, TOML values the config module
//! keeps without knowing their forms; `compile` (`decl.rs`) checks them
//! (`wharf::check_config` runs it before anything binds) and names the rule
//! and field at fault. A reload (`POST /admin/rules/reload`, SIGHUP) reads
//! the file's rules again and swaps them in; a file that does not read or a
//! rule that does not compile keeps the old ones. Rules set in code
//! (`Wharf::set_rules`) are kept, and run after the file's. The old set's
//! forwards send what they hold and end. At shutdown `Rules::shutdown`
//! runs before the task-queue workers and the store writer stop: forwards
//! stop retrying, dead-letter what they hold, and are waited for up to the
//! shutdown timeout.

mod action;
mod decl;
pub mod forward;
mod matcher;

use std::cell::OnceCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;

use crate::broker::hooks::{HookFuture, PublishHook};
use crate::broker::{Broker, Enqueue, Publish, Source};
use crate::routing::FilterTrie;

pub use action::{Action, Template};
pub use decl::{RuleDecl, compile};
pub use forward::{Forward, ForwardSpec};
pub use matcher::{Bounds, Context, JsonTest, Matcher, TextTest, When, captures};

use action::{Fill, Step};

/// How many times a message may be republished by rules in a row (a
/// republish whose copy a rule republishes again...). Past it the
/// republish fails and is counted: a rule loop cannot spin.
pub const MAX_DEPTH: u8 = 8;

/// A rule: a name, a matcher tree and a chain of actions. Built from
/// `[[rules]]` in the config file, or in code:
///
/// ```
/// use wharf::rules::{Action, Rule, Template, When};
///
/// let rule = Rule::when(When::topic("tenants/+/orders/#"))
///     .then([Action::Republish {
///         topic: Template::parse("orders/{1}").unwrap(),
///         retain: false,
///     }])
///     .named("tenant-orders");
/// assert_eq!(rule.name(), "tenant-orders");
/// ```
#[derive(Debug, Clone)]
pub struct Rule {
    name: String,
    when: When,
    then: Vec<Action>,
}

/// A rule being built: its matcher tree, waiting for its actions.
#[derive(Debug, Clone)]
pub struct RuleWhen {
    when: When,
}

impl Rule {
    /// Starts a rule that applies to messages matching `when`.
    pub fn when(when: When) -> RuleWhen {
        RuleWhen { when }
    }

    /// Names it (rules without a name are called `rule-N` by their place).
    #[must_use]
    pub fn named(mut self, name: &str) -> Rule {
        self.name = name.to_owned();
        self
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl RuleWhen {
    /// The actions, run in order on each matching message.
    pub fn then(self, then: impl IntoIterator<Item = Action>) -> Rule {
        Rule {
            name: String::new(),
            when: self.when,
            then: then.into_iter().collect(),
        }
    }
}

/// A loaded rule with its counters.
struct Loaded {
    name: String,
    from: &'static str,
    when: When,
    steps: Vec<Step>,
    /// Whether an action's template uses captures (only then are they
    /// worked out).
    captures: bool,
    hits: AtomicU64,
}

/// The rules in force: in order, with the trie that finds them by topic.
#[derive(Default)]
struct RuleSet {
    rules: Vec<Loaded>,
    /// Rule indexes by the topic filters they require.
    index: FilterTrie<u32>,
    /// Rules that may match any topic: tried on every message.
    everywhere: Vec<u32>,
}

impl RuleSet {
    fn build(file: &[Rule], code: &[Rule]) -> RuleSet {
        let mut set = RuleSet::default();
        let all = file
            .iter()
            .map(|r| (r, "config"))
            .chain(code.iter().map(|r| (r, "code")));
        for (i, (rule, from)) in all.enumerate() {
            let at = u32::try_from(i).unwrap_or(u32::MAX);
            match rule.when.required_filters() {
                Some(filters) => filters.iter().for_each(|f| {
                    set.index.insert(f, at);
                }),
                None => set.everywhere.push(at),
            }
            let captures = rule.then.iter().any(|a| match a {
                Action::Republish { topic: t, .. } | Action::Enqueue { queue: t, .. } => {
                    t.max_capture() > 0
                }
                Action::SetHeader(_, t) => t.max_capture() > 0,
                _ => false,
            });
            set.rules.push(Loaded {
                name: if rule.name.is_empty() {
                    format!("rule-{}", i + 1)
                } else {
                    rule.name.clone()
                },
                from,
                when: rule.when.clone(),
                steps: rule.then.iter().cloned().map(Step::new).collect(),
                captures,
                hits: AtomicU64::new(0),
            });
        }
        set
    }

    /// The rules that may match `topic`, in order.
    fn candidates(&self, topic: &str) -> Vec<u32> {
        let mut out = self.everywhere.clone();
        if !self.index.is_empty() {
            self.index.for_each_match(topic, |i| out.push(*i));
        }
        if out.len() > 1 {
            out.sort_unstable();
            out.dedup();
        }
        out
    }
}

/// The broker's rules: the set in force (swapped whole on reload, so a
/// message sees one set from start to end), the rules it was built from,
/// and where the file ones come from.
pub struct Rules {
    /// Whether any rule is loaded: the publish path reads only this when
    /// there are none.
    active: AtomicBool,
    set: RwLock<Arc<RuleSet>>,
    /// The rules from the config file, and the app's own.
    sources: Mutex<(Vec<Rule>, Vec<Rule>)>,
    /// The config file `reload` reads again.
    file: Mutex<Option<PathBuf>>,
    /// Set at shutdown: forwards stop retrying.
    stopping: Arc<AtomicBool>,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            active: AtomicBool::new(false),
            set: RwLock::new(Arc::default()),
            sources: Mutex::new((Vec::new(), Vec::new())),
            file: Mutex::new(None),
            stopping: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// Why a reload kept the old rules.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The broker was started without a config file.
    #[error("the broker was started without a config file, so there is nothing to re-read")]
    NoFile,
    /// The file is unreadable or a rule in it is invalid.
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
}

impl Rules {
    /// Whether any rule is loaded.
    #[inline]
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    fn install(&self, sources: &(Vec<Rule>, Vec<Rule>)) {
        let set = RuleSet::build(&sources.0, &sources.1);
        let any = !set.rules.is_empty();
        *self.set.write() = Arc::new(set);
        self.active.store(any, Ordering::Relaxed);
    }

    /// Replaces the rules that came from the config file (kept in front
    /// of the app's own), and remembers the file for [`Rules::reload`].
    pub fn set_configured(&self, rules: Vec<Rule>, file: Option<PathBuf>) {
        let mut sources = self.sources.lock();
        sources.0 = rules;
        self.install(&sources);
        *self.file.lock() = file;
    }

    /// Replaces the app's own rules (run after the config file's).
    pub fn set_code(&self, rules: Vec<Rule>) {
        let mut sources = self.sources.lock();
        sources.1 = rules;
        self.install(&sources);
    }

    /// Reads the config file again and replaces its rules; a file that
    /// does not read or a rule that does not compile keeps the old rules.
    /// Messages being evaluated finish with the set they started with,
    /// and forwards of the old set send what they hold. Blocking (reads
    /// the file). Returns how many rules are in force.
    ///
    /// # Errors
    /// No file, or why the file was refused.
    pub fn reload(&self) -> Result<usize, ReloadError> {
        let file = self.file.lock().clone().ok_or(ReloadError::NoFile)?;
        let config = crate::config::Config::from_file(&file)?;
        let rules = compile(&config.rules)?;
        let mut sources = self.sources.lock();
        sources.0 = rules;
        self.install(&sources);
        Ok(sources.0.len() + sources.1.len())
    }

    /// Drops every rule and tells forwards to stop retrying; what they
    /// still hold is dead-lettered (or counted dropped) as they finish.
    /// Returns once every forward lane has ended, or at `timeout`.
    pub fn shutdown(&self, timeout: Duration) {
        self.stopping.store(true, Ordering::Release);
        let forwards: Vec<Arc<Forward>> = self.forwards();
        {
            let mut sources = self.sources.lock();
            *sources = (Vec::new(), Vec::new());
            self.install(&sources);
        }
        let deadline = std::time::Instant::now() + timeout;
        for f in forwards {
            f.close();
            while !f.finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn forwards(&self) -> Vec<Arc<Forward>> {
        let set = self.set.read().clone();
        set.rules
            .iter()
            .flat_map(|r| r.steps.iter())
            .filter_map(|s| match &s.action {
                Action::Forward(f) => Some(f.clone()),
                _ => None,
            })
            .collect()
    }

    /// The rules in force with their counters, for `GET /admin/rules`.
    pub fn report(&self) -> Vec<RuleReport> {
        let set = self.set.read().clone();
        set.rules
            .iter()
            .map(|r| RuleReport {
                name: r.name.clone(),
                from: r.from,
                when: r.when.describe(),
                hits: r.hits.load(Ordering::Relaxed),
                then: r
                    .steps
                    .iter()
                    .map(|s| ActionReport {
                        kind: s.action.kind(),
                        does: s.action.describe(),
                        runs: s.runs.load(Ordering::Relaxed),
                        failures: s.failures.load(Ordering::Relaxed),
                        forward: match &s.action {
                            Action::Forward(f) => Some(f.report()),
                            _ => None,
                        },
                    })
                    .collect(),
            })
            .collect()
    }

    /// Runs the rules on `msg`: returns it (headers edited) to publish to
    /// its own topic, or `None` when a rule dropped it.
    pub(crate) async fn run(
        &self,
        broker: &Broker,
        mut msg: Publish,
        source: &Source<'_>,
        depth: u8,
    ) -> Option<Publish> {
        // The set is cloned (one reference count) only for a message some
        // rule may match.
        let (set, candidates) = {
            let set = self.set.read();
            let candidates = set.candidates(&msg.topic);
            if candidates.is_empty() {
                return Some(msg);
            }
            (set.clone(), candidates)
        };
        let json = OnceCell::new();
        let mut dropped = false;
        'rules: for i in candidates {
            let Some(rule) = set.rules.get(i as usize) else {
                continue;
            };
            // Matched, with the captures if the actions use any.
            let captured: Option<Vec<String>> = {
                let cx =
                    matcher::Context::new(&msg.topic, &msg.payload, &msg.headers, source, &json);
                if rule.when.matches(&cx) {
                    Some(match cx.matched.get() {
                        Some(f) if rule.captures => captures(f, &msg.topic)
                            .into_iter()
                            .map(str::to_owned)
                            .collect(),
                        _ => Vec::new(),
                    })
                } else {
                    None
                }
            };
            let Some(caps) = captured else { continue };
            rule.hits.fetch_add(1, Ordering::Relaxed);
            let caps: Vec<&str> = caps.iter().map(String::as_str).collect();
            for step in &rule.steps {
                let fill = Fill {
                    captures: &caps,
                    topic: &msg.topic,
                    client_id: source.client_id.unwrap_or(""),
                    principal: source.principal.unwrap_or(""),
                };
                match &step.action {
                    Action::Republish { topic, retain } => {
                        let copy = Publish {
                            topic: topic.render(&fill),
                            retain: *retain,
                            origin: 0,
                            ..msg.clone()
                        };
                        let ok = if depth >= MAX_DEPTH {
                            tracing::warn!(rule = %rule.name, topic = %copy.topic, "republish refused: {MAX_DEPTH} republishes in a row (a rule loop?)");
                            false
                        } else {
                            let at = Box::pin(broker.publish_at(copy, source, depth + 1));
                            match at.await {
                                Ok(_) => true,
                                Err(e) => {
                                    tracing::debug!(rule = %rule.name, "republish refused: {e}");
                                    false
                                }
                            }
                        };
                        step.ran(ok);
                    }
                    Action::Enqueue {
                        queue,
                        priority,
                        ttl_ms,
                    } => {
                        let e = Enqueue {
                            queue: queue.render(&fill),
                            // Its own copy: a queue may keep it for long,
                            // and the payload may be a view of a
                            // connection's read buffer.
                            payload: bytes::Bytes::copy_from_slice(&msg.payload),
                            headers: msg.headers.clone(),
                            priority: *priority,
                            ttl_ms: *ttl_ms,
                        };
                        let done = broker.queues().enqueue_durable(e).await;
                        if let Err(e) = &done {
                            tracing::debug!(rule = %rule.name, "enqueue refused: {e}");
                        }
                        step.ran(done.is_ok());
                    }
                    Action::SetHeader(name, value) => {
                        let v = value.render(&fill);
                        msg.headers.insert(name.clone(), v);
                        step.ran(true);
                    }
                    Action::RemoveHeader(name) => {
                        msg.headers.remove(name);
                        step.ran(true);
                    }
                    Action::Drop => {
                        dropped = true;
                        step.ran(true);
                    }
                    Action::DeadLetter(queue) => {
                        let mut headers = msg.headers.clone();
                        headers.insert("rule".into(), rule.name.clone());
                        headers.insert("dead-letter-topic".into(), msg.topic.clone());
                        let done = broker
                            .queues()
                            .enqueue_durable(Enqueue {
                                queue: queue.clone(),
                                // Its own copy, as for Enqueue above.
                                payload: bytes::Bytes::copy_from_slice(&msg.payload),
                                headers,
                                priority: 0,
                                ttl_ms: None,
                            })
                            .await;
                        if let Err(e) = &done {
                            tracing::warn!(rule = %rule.name, queue = %queue, "dead-letter refused: {e}");
                        }
                        dropped = true;
                        step.ran(done.is_ok());
                    }
                    Action::Forward(f) => {
                        let sent = {
                            let cx = matcher::Context::new(
                                &msg.topic,
                                &msg.payload,
                                &msg.headers,
                                source,
                                &json,
                            );
                            f.send(&cx, broker, &self.stopping, &rule.name)
                        };
                        let ok = sent.is_ok();
                        if let Err(refused) = sent {
                            f.give_up(broker, refused).await;
                        }
                        step.ran(ok);
                    }
                    Action::Stop => {
                        step.ran(true);
                        break 'rules;
                    }
                }
            }
        }
        (!dropped).then_some(msg)
    }
}

/// One rule in `GET /admin/rules`.
#[derive(Debug, Clone, Serialize)]
pub struct RuleReport {
    /// Its name.
    pub name: String,
    /// `config` (the file) or `code` (the embedding app).
    pub from: &'static str,
    /// Its matcher tree, in words.
    pub when: String,
    /// Messages it matched since it was loaded.
    pub hits: u64,
    /// Its actions, in order.
    pub then: Vec<ActionReport>,
}

/// One action in `GET /admin/rules`.
#[derive(Debug, Clone, Serialize)]
pub struct ActionReport {
    /// `republish`, `enqueue`, `set_header`, ...
    pub kind: &'static str,
    /// What it does, in words.
    pub does: String,
    /// Times it ran.
    pub runs: u64,
    /// Times it failed.
    pub failures: u64,
    /// A forward's backends and counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<forward::ForwardReport>,
}

/// The rules as the broker's publish hook: every publish, whichever way it
/// came in, passes here before the local topics (see `broker::hooks`).
impl PublishHook for Rules {
    #[inline]
    fn active(&self) -> bool {
        Rules::active(self)
    }

    fn apply<'a>(
        &'a self,
        broker: &'a Broker,
        msg: Publish,
        source: &'a Source<'a>,
        depth: u8,
    ) -> HookFuture<'a, Option<Publish>> {
        // Boxed: inline, the rules' future (~1.4 KB) would make every
        // publish's future that size, rules or not.
        Box::pin(self.run(broker, msg, source, depth))
    }
}
