//! Wharf inside your own Actix app: [`Wharf`] owns a running broker (store,
//! task-queue workers, store writer, idle-topic sweeper) without an HTTP
//! server of its own. Mount its routes in your `App` under any prefix,
//! publish from your handlers, and subscribe your own actors. The example
//! is on [`Wharf`]'s page.

mod builder;
mod error;
mod queues;
mod running;
mod workers;

pub use builder::WharfBuilder;
pub use error::Error;
pub use queues::{ActorConsumer, QueueMessage, Settler};
pub use workers::{JobHandler, JobWorkers};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use actix::prelude::*;
use actix_web::web;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::broker::jobs::{JOBS_DLQ, Jobs};
use crate::broker::{
    Broker, BrokerError, DeliveryOutcome, Publish, PublishOutcome, Published, Sink, Subscription,
};
use crate::config::Config;
use crate::session::Sessions;
use crate::store::Store;
use crate::taskq::Scheduler;
use crate::transport::{self, AppState, Health};
use running::Running;

/// A running broker you embed in your own Actix app: mount its routes
/// under any prefix, publish and enqueue from your handlers, subscribe
/// your actors ([`Wharf::subscribe`], [`Wharf::consume`]). Cheap to
/// clone; every clone is the same broker. Stop it with
/// [`Wharf::shutdown`] (dropping the last clone does the same, blocking
/// briefly). Settings in code: [`Wharf::builder`].
///
/// # Examples
///
/// ```no_run
/// use actix_web::{App, HttpServer, web};
/// use wharf::{Config, Wharf};
///
/// #[actix_web::main]
/// async fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let wharf = Wharf::start(Config::default()).await?;
///     let routes = wharf.clone();
///     HttpServer::new(move || {
///         App::new()
///             .service(web::scope("/broker").configure(routes.configure()))
///             .route("/hello", web::post().to(hello))
///             .app_data(web::Data::new(routes.clone()))
///     })
///     .bind("127.0.0.1:8080")?
///     .run()
///     .await?;
///     wharf.shutdown().await?;
///     Ok(())
/// }
///
/// async fn hello(wharf: web::Data<Wharf>) -> &'static str {
///     let _ = wharf.publish("greetings", "hello").await;
///     "published"
/// }
/// ```

#[derive(Clone)]
pub struct Wharf {
    inner: Arc<Inner>,
}

struct Inner {
    broker: Broker,
    jobs: Jobs,
    sessions: Sessions,
    state: web::Data<AppState>,
    health: web::Data<Health>,
    config: Arc<Config>,
    /// The rules every publish goes through (the broker's publish hook).
    rules: Arc<crate::rules::Rules>,
    /// Taken by shutdown (or drop).
    running: Mutex<Option<Running>>,
}

/// Checks `config` as a start does before it binds anything: its own
/// ranges and relations ([`Config::validate`]) and its rules, compiled
/// (`[[rules]]`: the rules module knows their forms, the config only
/// holds them).
///
/// # Errors
/// The first bad key, named (`rules[2] (orders).then[1].republish`).
pub fn check_config(config: &Config) -> Result<(), crate::config::ConfigError> {
    config.validate()?;
    crate::rules::compile(&config.rules)?;
    Ok(())
}

impl Wharf {
    /// Validates `config`, opens the store, restores retained messages and
    /// starts the workers. Must be called inside an actix system (the idle
    /// sweeper is spawned on it). `server.*` settings other than the
    /// shutdown timeout are the embedding app's business.
    ///
    /// # Errors
    /// An invalid config, a store that will not open, or workers that
    /// cannot start.
    pub async fn start(config: Config) -> Result<Wharf, Error> {
        check_config(&config)?;
        // Key files are read before the store opens: a bad one fails fast.
        let auth = crate::auth::Auth::new(&config.auth)?;
        let store_config = config.store.clone();
        // sled does blocking I/O: open and read it off the async thread.
        let (defaults, declared) = (config.queue_defaults.clone(), config.queues.clone());
        let crate::store::Recovered {
            store,
            retained,
            queues,
            jobs: stored_jobs,
            history,
            unclean,
        } = web::block(move || {
            Store::recover(&store_config, move |name| {
                declared
                    .iter()
                    .find(|d| d.name == name)
                    .map_or(defaults.memory_window, |d| {
                        d.options(&defaults).memory_window
                    })
            })
        })
        .await??;
        let writer = store.start_writer(&config.store)?;
        let scheduler = Scheduler::new(&config.scheduler)?;
        let broker = Broker::with_store(scheduler.handle(), writer.handle(), &config.topics);
        // The rules see every publish first: the broker's publish hook.
        let rules = Arc::new(crate::rules::Rules::default());
        let _ = broker.set_publish_hook(rules.clone());
        // Joined before anything subscribes (declared queues' bindings),
        // so every subscription is heard from the other nodes.
        let cluster = if config.cluster.enabled() {
            let cluster =
                crate::cluster::Cluster::start(&config.cluster, broker.downgrade()).await?;
            // The other nodes: the broker's remote (publishes forwarded,
            // calls for queues homed elsewhere sent there).
            let _ = broker.set_remote(Arc::new(cluster.clone()));
            // With failover, the queues held here are journaled too.
            cluster.use_store(&writer.handle());
            // Queues and jobs homed on other nodes are called there.
            cluster.set_homes(crate::cluster::home::Homes::new(
                &config.cluster.members,
                &config.queues,
                &config.queue_defaults,
            ));
            Some(cluster)
        } else {
            None
        };
        let restored = retained.len();
        broker.restore_retained(retained).await?;
        broker.history().set(&config.history).await;
        broker.presence().set(&config.presence).await;
        let topics = broker.history().restore(history, unclean).await?;
        if topics > 0 {
            tracing::info!(
                topics,
                new_epochs = unclean,
                "topic history restored from the store"
            );
        }
        if restored > 0 {
            tracing::info!(restored, "retained messages restored from the store");
        }
        broker
            .queues()
            .configure_queues(config.queue_defaults.clone(), &config.queues);
        let (queue_count, started) = (queues.queues.len(), std::time::Instant::now());
        let messages = broker.queues().restore_queues(queues).await?;
        if queue_count > 0 {
            tracing::info!(
                queues = queue_count,
                messages,
                ms = started.elapsed().as_millis() as u64,
                "queues restored from the store"
            );
        }
        broker.durable().declare_queues(&config.queues).await?;
        // Messages kept here for a queue that now lives elsewhere (members
        // or a home changed) are not served: say so.
        for name in broker.queues().queue_names() {
            if let Some((_, home)) = broker.home_elsewhere(&name)
                && let Some(depth) = broker.local_queue_info(&name).await.map(|i| i.depth)
                && depth > 0
            {
                tracing::warn!(
                    queue = %name,
                    home = %home,
                    depth,
                    "cluster: this node holds messages of a queue that lives on another node; \
                     they are not served until the queue's home is this node again"
                );
            }
        }
        rules.set_configured(crate::rules::compile(&config.rules)?, config.file.clone());
        let dead_letters = broker.downgrade();
        let jobs = Jobs::new(
            config.jobs.clone(),
            &scheduler.handle(),
            Some(writer.handle()),
            Box::new(move |job| {
                // A dead job is copied to an ordinary queue, for people.
                let Some(broker) = dead_letters.upgrade() else {
                    return;
                };
                let payload = serde_json::to_vec(job).unwrap_or_default();
                broker.queues().enqueue_detached(crate::broker::Enqueue {
                    queue: JOBS_DLQ.into(),
                    payload: payload.into(),
                    ..Default::default()
                });
            }),
        );
        if let Some(cluster) = &cluster {
            cluster.serve_jobs(&jobs);
        }
        if cluster.as_ref().is_some_and(|c| c.moves_jobs()) {
            // Installed from the cluster's journal by the node that takes
            // their lease (this one, maybe): what this store holds may be
            // older.
            if !stored_jobs.is_empty() {
                tracing::info!(
                    jobs = stored_jobs.len(),
                    "job records in the store wait for this node to take the jobs' lease"
                );
            }
        } else {
            let restored_jobs = jobs.restore(stored_jobs).await?;
            if restored_jobs > 0 {
                tracing::info!(jobs = restored_jobs, "jobs restored from the store");
            }
        }
        let sessions = Sessions::new();
        if let Some(cluster) = &cluster {
            // An MQTT client that connects on another node takes over its
            // connection here.
            let sessions = sessions.clone();
            cluster.on_connect(Box::new(move |client, principal, clean, at_ms| {
                let closed = crate::session::mqtt::take_over_elsewhere(
                    &sessions, client, principal, clean, at_ms,
                );
                if closed > 0 {
                    tracing::debug!(client, "cluster: connection taken over on another node");
                }
            }));
        }
        let config = Arc::new(config);
        let state = web::Data::new(AppState {
            broker: broker.clone(),
            jobs: jobs.clone(),
            sessions: sessions.clone(),
            config: config.clone(),
            bodies: crate::transport::BodyReader::new(&config.server),
            auth,
            streams: crate::transport::stream_slots(),
            sse: crate::transport::sse_slots(),
            rules: rules.clone(),
            cluster: cluster.clone(),
            session_config: Arc::new(config.session.clone()),
        });
        // Topics nobody uses any more are swept every idle timeout.
        let idle = Duration::from_secs(config.topics.idle_timeout_s);
        let sweeping = broker.clone();
        let sweeper = actix_rt::spawn(async move {
            let mut tick = actix_rt::time::interval(idle);
            loop {
                tick.tick().await;
                let removed = sweeping.sweep_idle().await;
                if removed > 0 {
                    tracing::debug!(removed, "idle topics swept");
                }
            }
        });
        // Queue deadlines (ack timeouts, delays, expiry) are driven from
        // here.
        let (ticking, ticking_jobs) = (broker.clone(), jobs.clone());
        let ticker = actix_rt::spawn(async move {
            let mut tick = actix_rt::time::interval(crate::broker::QUEUE_TICK);
            let mut ticks = 0u32;
            loop {
                tick.tick().await;
                ticking.queues().tick_queues();
                ticking_jobs.tick();
                // Topic history reaches the store once a second.
                ticks = ticks.wrapping_add(1);
                if ticks % 20 == 0 {
                    ticking.history().flush_detached();
                }
            }
        });
        // Filters no local subscription uses any more stop being heard
        // from the other nodes.
        let reconciler = cluster.clone().map(|cluster| {
            let broker = broker.downgrade();
            actix_rt::spawn(async move {
                let mut tick = actix_rt::time::interval(crate::cluster::RECONCILE_EVERY);
                loop {
                    tick.tick().await;
                    let Some(broker) = broker.upgrade() else {
                        return;
                    };
                    let released = cluster.reconcile(&broker).await;
                    let forgotten = cluster.forget_lost_consumers(&broker).await;
                    let again = cluster.check_consumers().await;
                    if again > 0 {
                        tracing::info!(again, "cluster: consumers attached again at their homes");
                    }
                    if forgotten > 0 {
                        tracing::info!(forgotten, "cluster: consumers on lost nodes detached");
                    }
                    if released > 0 {
                        tracing::debug!(released, "cluster: unused filters released");
                    }
                }
            })
        });
        let stopping = broker.clone();
        if let Some(cluster) = &cluster {
            // Restored and configured: other nodes' calls may come in.
            cluster.serve_calls();
        }
        Ok(Wharf {
            inner: Arc::new(Inner {
                broker,
                jobs,
                sessions,
                state,
                health: web::Data::new(Health::new()),
                config,
                rules: rules.clone(),
                running: Mutex::new(Some(Running {
                    broker: stopping,
                    store,
                    writer,
                    scheduler,
                    sweeper,
                    ticker,
                    rules: rules.clone(),
                    cluster: cluster.zip(reconciler),
                    threads: Vec::new(),
                })),
            }),
        })
    }

    /// What the routes share, for the server's other listeners (MQTT over
    /// TCP).
    pub(crate) fn app_state(&self) -> AppState {
        self.inner.state.get_ref().clone()
    }

    /// The credential checker the routes use: an embedding app checks its
    /// own requests' credentials with it too.
    pub fn auth(&self) -> &crate::auth::Auth {
        &self.inner.state.auth
    }

    /// The broker core, for everything the convenience methods do not cover.
    pub fn broker(&self) -> &Broker {
        &self.inner.broker
    }

    /// Keeps a thread to stop (and wait for) at shutdown; a broker
    /// already shut down stops it at once.
    fn adopt_thread(&self, arbiter: actix_rt::Arbiter) {
        match self.inner.running.lock().as_mut() {
            Some(running) => running.threads.push(arbiter),
            None => {
                arbiter.stop();
            }
        }
    }

    /// Jobs and workers: enqueue jobs, register workers, report outcomes.
    pub fn jobs(&self) -> &Jobs {
        &self.inner.jobs
    }

    /// The live WebSocket sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A function that mounts Wharf's routes and the state they need on an
    /// `App` or a scope: `web::scope("/broker").configure(wharf.configure())`.
    /// The routes: `/health`, `/ws`, `/mqtt` (and `/` for an MQTT
    /// upgrade), `/topics/{name}`, `/queues` and `/queues/{name}` (with
    /// `/messages` and `/redrive`), `/jobs`, `/jobs/{id}`,
    /// `/jobs/{id}/outcome`, `/workers`, `/workers/{id}/ping`,
    /// `/workers/{id}/dequeue`, `/admin/sessions` and `/admin/jobs`
    /// (proto/http.md specifies them).
    pub fn configure(&self) -> impl Fn(&mut web::ServiceConfig) + Clone + 'static {
        let (state, health) = (self.inner.state.clone(), self.inner.health.clone());
        move |cfg: &mut web::ServiceConfig| {
            cfg.app_data(state.clone()).app_data(health.clone());
            transport::routes(cfg);
        }
    }

    /// A function that mounts the app's socket type `T` at `path` (a
    /// route pattern: `/customers/{id}`), with the state it needs:
    /// `App::new().configure(wharf.socket::<CustomerSocket>("/customers/{id}"))`.
    /// See [`crate::sockets`] for what the socket gets.
    pub fn socket<T: crate::sockets::SocketType>(
        &self,
        path: &str,
    ) -> impl Fn(&mut web::ServiceConfig) + Clone + 'static {
        let state = self.inner.state.clone();
        let path = path.to_owned();
        move |cfg: &mut web::ServiceConfig| {
            cfg.app_data(state.clone()).service(
                web::resource(path.as_str())
                    .route(web::get().to(transport::typed::upgrade::<T>))
                    .default_service(web::to(transport::typed::method_not_allowed)),
            );
        }
    }

    /// The live sockets of the app's type `T`: find them by id, send to
    /// them, tell them events, close them.
    pub fn sockets<T: crate::sockets::SocketType>(&self) -> crate::sockets::Sockets<T> {
        crate::sockets::Sockets::new(self.inner.sessions.clone())
    }

    /// Publishes a message (see [`Broker::publish`] for every option).
    ///
    /// # Errors
    /// An invalid topic or an overloaded topic.
    pub async fn publish(
        &self,
        topic: impl Into<String>,
        payload: impl Into<Bytes>,
    ) -> Result<PublishOutcome, BrokerError> {
        self.inner
            .broker
            .publish(Publish {
                topic: topic.into(),
                payload: payload.into(),
                ..Publish::default()
            })
            .await
    }

    /// Replaces the app's own rules (run after the config file's
    /// `[[rules]]`, on every message published from any way in). An app
    /// adds matcher kinds of its own with [`crate::rules::Matcher`].
    ///
    /// ```
    /// use wharf::rules::{Action, Rule, Template, When};
    /// # async fn f(wharf: wharf::Wharf) {
    /// wharf.set_rules(vec![
    ///     Rule::when(When::topic("sensors/+/temp"))
    ///         .then([Action::Enqueue {
    ///             queue: Template::parse("readings-{1}").unwrap(),
    ///             priority: 0,
    ///             ttl_ms: None,
    ///         }])
    ///         .named("readings"),
    /// ]);
    /// # }
    /// ```
    pub fn set_rules(&self, rules: Vec<crate::rules::Rule>) {
        self.inner.rules.set_code(rules);
    }

    /// The rules in force (the config file's and the app's): their
    /// report, a reload of the file.
    pub fn rules(&self) -> &crate::rules::Rules {
        &self.inner.rules
    }

    /// The rules, shared, for work that outlives a borrow (a reload on
    /// the blocking pool).
    pub(crate) fn rules_handle(&self) -> Arc<crate::rules::Rules> {
        self.inner.rules.clone()
    }

    /// Subscribes an actor to a topic filter: each message arrives as a
    /// [`Delivery`]. Deliveries use `try_send`, so they are bounded by the
    /// actor's mailbox capacity (`ctx.set_mailbox_capacity`): a message
    /// that finds the mailbox full is dropped and counted in
    /// [`ActorSubscription::dropped`]. The subscription holds the actor's
    /// address, so the actor lives as long as its subscription (the code
    /// that started it need not keep its `Addr`): it ends when
    /// [`ActorSubscription::cancel`] is called or when the actor stops
    /// itself (`ctx.stop()`).
    ///
    /// # Errors
    /// An invalid filter or an overloaded topic.
    pub async fn subscribe(
        &self,
        filter: &str,
        recipient: Recipient<Delivery>,
    ) -> Result<ActorSubscription, BrokerError> {
        let sink = Arc::new(RecipientSink {
            id: crate::broker::next_sink_id(),
            recipient,
            closed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
        });
        let id = format!("actor-{}", sink.id);
        let sub = Subscription::new(sink.clone(), &id, filter, crate::broker::SubTag::None, None);
        self.inner.broker.subscribe(sub.clone()).await?;
        Ok(ActorSubscription {
            sub,
            sink,
            broker: self.inner.broker.clone(),
        })
    }

    /// Stops the broker: closes WebSocket sessions (after delivering what is
    /// queued, with 1001), ends the dashboard's streams, stops the workers and the store writer, and
    /// syncs the store. Stop your HTTP server first, so no request is using
    /// the broker. Idempotent.
    ///
    /// # Errors
    /// The store failing to sync.
    pub async fn shutdown(&self) -> Result<(), Error> {
        self.inner
            .sessions
            .close_all(1001, crate::session::close_reason::SHUTDOWN, true);
        self.inner.state.streams.close();
        let Some(running) = self.inner.running.lock().take() else {
            return Ok(());
        };
        let timeout = Duration::from_secs(self.inner.config.server.shutdown_timeout_s.max(1));
        running.stop_bounded(timeout).await
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(running) = self.running.get_mut().take() {
            self.sessions
                .close_all(1001, crate::session::close_reason::SHUTDOWN, true);
            let timeout = Duration::from_secs(self.config.server.shutdown_timeout_s.max(1));
            if let Err(e) = running.stop(timeout, &std::sync::atomic::AtomicUsize::new(0)) {
                tracing::error!("stopping the broker: {e}");
            }
        }
    }
}

impl std::fmt::Debug for Wharf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wharf")
            .field("broker", &self.inner.broker)
            .finish_non_exhaustive()
    }
}

/// A message for an actor subscribed with [`Wharf::subscribe`]: the shared
/// published message (never copied per subscriber).
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub struct Delivery {
    /// The message, with its topic, sequence number, payload and headers.
    pub message: Arc<Published>,
}

/// An actor's subscription. Dropping it does not end it; call
/// [`ActorSubscription::cancel`] (or stop the actor).
pub struct ActorSubscription {
    sub: Subscription,
    sink: Arc<RecipientSink>,
    broker: Broker,
}

impl ActorSubscription {
    /// Messages dropped because the actor's mailbox was full.
    pub fn dropped(&self) -> u64 {
        self.sink.dropped.load(Ordering::Relaxed)
    }

    /// Ends the subscription.
    ///
    /// # Errors
    /// A topic too busy to take the unsubscribe now (deliveries stop
    /// anyway; the topic drops the subscription on its next publish).
    pub async fn cancel(self) -> Result<(), BrokerError> {
        self.sub.cancel();
        self.broker
            .unsubscribe(self.sink.id, &self.sub.id, &self.sub.filter)
            .await
    }
}

struct RecipientSink {
    id: u64,
    /// Strong: the subscription keeps its actor alive until it is
    /// cancelled or the actor stops itself (`ctx.stop()`).
    recipient: Recipient<Delivery>,
    closed: AtomicBool,
    dropped: AtomicU64,
}

impl Sink for RecipientSink {
    fn id(&self) -> u64 {
        self.id
    }

    fn deliver(&self, _sub: &Subscription, msg: &Arc<Published>) -> DeliveryOutcome {
        match self.recipient.try_send(Delivery {
            message: msg.clone(),
        }) {
            Ok(()) => DeliveryOutcome::Queued,
            Err(SendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                DeliveryOutcome::Dropped
            }
            Err(SendError::Closed(_)) => {
                self.closed.store(true, Ordering::Relaxed);
                DeliveryOutcome::Closed
            }
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || !self.recipient.connected()
    }
}
