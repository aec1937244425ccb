//! What one principal may do, compiled from [`Permissions`] for the
//! checks every operation makes: [`Grants::may`].

use crate::config::auth::Permissions;
use crate::routing;

/// One operation's need, as the endpoints ask it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right<'a> {
    /// Publish to this topic.
    Publish(&'a str),
    /// Subscribe with this filter (covered by an allowed filter).
    Subscribe(&'a str),
    /// Enqueue to this queue.
    Enqueue(&'a str),
    /// Consume this queue, or settle its deliveries.
    Consume(&'a str),
    /// Consume what this filter matches: a durable subscription.
    ConsumeFilter(&'a str),
    /// Enqueue jobs of this kind, or read their status.
    EnqueueJob(&'a str),
    /// Work on jobs of this kind.
    WorkJob(&'a str),
    /// Work on jobs of every kind (a worker registered with no kinds).
    WorkAllJobs,
    /// Admin routes, deletion, purge, redrive.
    Admin,
}

impl Right<'_> {
    /// The right's name in messages and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Right::Publish(_) => "publish",
            Right::Subscribe(_) => "subscribe",
            Right::Enqueue(_) => "enqueue",
            Right::Consume(_) | Right::ConsumeFilter(_) => "consume",
            Right::EnqueueJob(_) => "enqueue_jobs",
            Right::WorkJob(_) | Right::WorkAllJobs => "work_jobs",
            Right::Admin => "admin",
        }
    }

    /// What the right is about (a topic, a queue, a kind), for messages.
    pub fn object(&self) -> Option<&str> {
        match *self {
            Right::Publish(s)
            | Right::Subscribe(s)
            | Right::Enqueue(s)
            | Right::Consume(s)
            | Right::ConsumeFilter(s)
            | Right::EnqueueJob(s)
            | Right::WorkJob(s) => Some(s),
            Right::Admin => None,
            Right::WorkAllJobs => Some("#"),
        }
    }
}

/// One list of filters, with the common "everything" case answered
/// without a walk.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Grant {
    filters: Vec<String>,
    /// `#` is among the filters: every name is allowed.
    all: bool,
}

impl Grant {
    fn new(filters: &[String], name: &str) -> Grant {
        // A name that is not a principal name (a wildcard, a `/`: see
        // `check_principal_name`; every source checks it) could widen a
        // `%u` grant past its owner: such a name gets no `%u` grant.
        let safe = super::check_principal_name(name).is_ok();
        let filters: Vec<String> = filters
            .iter()
            .filter(|f| safe || !f.contains("%u"))
            .map(|f| f.replace("%u", name))
            .collect();
        let all = filters.iter().any(|f| f == "#");
        Grant { filters, all }
    }

    // Permissions match level by level: `#` grants `$` topics too.
    fn allows(&self, name: &str) -> bool {
        self.all
            || self
                .filters
                .iter()
                .any(|f| routing::matches_levels(f, name))
    }

    fn covers(&self, filter: &str) -> bool {
        self.all
            || self
                .filters
                .iter()
                .any(|f| routing::covers_levels(f, filter))
    }

    fn is_empty(&self) -> bool {
        self.filters.is_empty()
    }
}

/// A principal's compiled permissions, optionally capped by a ceiling
/// (JWT permissions are intersected with `[auth.jwt] ceiling`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    publish: Grant,
    subscribe: Grant,
    enqueue: Grant,
    consume: Grant,
    enqueue_jobs: Grant,
    work_jobs: Grant,
    admin: bool,
    ceiling: Option<Box<Grants>>,
}

impl Grants {
    /// Compiles `p` for the principal `name` (`%u` becomes the name).
    pub fn new(p: &Permissions, name: &str) -> Grants {
        Grants {
            publish: Grant::new(&p.publish, name),
            subscribe: Grant::new(&p.subscribe, name),
            enqueue: Grant::new(&p.enqueue, name),
            consume: Grant::new(&p.consume, name),
            enqueue_jobs: Grant::new(&p.enqueue_jobs, name),
            work_jobs: Grant::new(&p.work_jobs, name),
            admin: p.admin,
            ceiling: None,
        }
    }

    /// These grants, allowing only what `ceiling` allows too.
    pub fn capped(mut self, ceiling: Grants) -> Grants {
        self.ceiling = Some(Box::new(ceiling));
        self
    }

    /// Whether a publish check walks filters (worth caching per topic)
    /// rather than answering from the `#` flag alone.
    pub fn publish_walks(&self) -> bool {
        // `#` answers every topic from the flag alone.
        !self.publish.all || self.ceiling.as_ref().is_some_and(|c| c.publish_walks())
    }

    /// Whether the principal may do `right`.
    pub fn may(&self, right: Right<'_>) -> bool {
        // Presence events: the broker's own topics. Reading them is
        // reading who subscribes to the topic; nobody publishes there.
        match right {
            Right::Publish(t) if t.starts_with(crate::routing::PRESENCE_PREFIX) => return false,
            Right::Subscribe(f) => {
                if let Some(topic) = f.strip_prefix(crate::routing::PRESENCE_PREFIX) {
                    return self.may(Right::Subscribe(topic));
                }
            }
            _ => {}
        }
        let own = match right {
            Right::Publish(t) => self.publish.allows(t),
            Right::Subscribe(f) => self.subscribe.covers(f),
            Right::Enqueue(q) => self.enqueue.allows(q),
            Right::Consume(q) => self.consume.allows(q),
            Right::ConsumeFilter(f) => self.consume.covers(f),
            Right::EnqueueJob(k) => self.enqueue_jobs.allows(k),
            Right::WorkJob(k) => self.work_jobs.allows(k),
            Right::WorkAllJobs => self.work_jobs.covers("#"),
            Right::Admin => self.admin,
        };
        own && self.ceiling.as_ref().is_none_or(|c| c.may(right))
    }

    /// Whether the principal may touch jobs at all (read a status by id).
    pub fn any_jobs(&self) -> bool {
        self.admin || !self.enqueue_jobs.is_empty() || !self.work_jobs.is_empty()
    }

    /// Whether the principal may work on some job kind (ping, dequeue,
    /// report outcomes as a worker).
    pub fn works_any(&self) -> bool {
        self.admin || !self.work_jobs.is_empty()
    }

    /// Whether the admin right is held.
    pub fn admin(&self) -> bool {
        self.may(Right::Admin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(publish: &[&str], subscribe: &[&str]) -> Grants {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect();
        Grants::new(
            &Permissions {
                publish: own(publish),
                subscribe: own(subscribe),
                ..Permissions::default()
            },
            "alice",
        )
    }

    #[test]
    fn filters_cover_or_not() {
        let g = grants(&["home/%u/#"], &["home/+/temp", "pub/#"]);
        assert!(g.may(Right::Publish("home/alice/x")));
        assert!(g.may(Right::Publish("home/alice")));
        assert!(!g.may(Right::Publish("home/bob/x")));
        assert!(g.may(Right::Subscribe("home/kitchen/temp")));
        assert!(g.may(Right::Subscribe("home/+/temp")));
        assert!(!g.may(Right::Subscribe("home/#")), "narrower grant");
        assert!(!g.may(Right::Subscribe("home/+/+")));
        assert!(g.may(Right::Subscribe("pub/a/+/#")));
        assert!(!g.may(Right::Enqueue("q")), "nothing granted");
        assert!(!g.may(Right::Admin));
    }

    #[test]
    fn hash_grants_dollar_names_too() {
        let g = Grants::new(&Permissions::everything(), "x");
        assert!(g.may(Right::Publish("a/b")));
        assert!(g.may(Right::Subscribe("#")));
        assert!(g.may(Right::Publish("$sys/x")));
        assert!(g.may(Right::Subscribe("$sys/#")));
        assert!(g.admin());
        let narrow = grants(&["+/x"], &["+/#"]);
        assert!(narrow.may(Right::Publish("$a/x")), "level by level");
        assert!(narrow.may(Right::Subscribe("$sys/#")));
        assert!(!narrow.may(Right::Publish("a/y")));
    }

    #[test]
    fn ceiling_intersects() {
        let ceiling = grants(&["a/#"], &["a/#"]);
        let g = grants(&["#"], &["a/b/#", "b/#"]).capped(ceiling);
        assert!(g.may(Right::Publish("a/x")));
        assert!(!g.may(Right::Publish("b/x")));
        assert!(g.may(Right::Subscribe("a/b/c")));
        assert!(!g.may(Right::Subscribe("b/c")));
    }
}
