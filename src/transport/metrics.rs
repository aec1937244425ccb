//! `GET /metrics`: the broker's numbers in the OpenMetrics text format
//! (which Prometheus scrapes), encoded by `prometheus-client`. The
//! handler gathers a [`Snapshot`] (the hot counters folded, the gauges
//! the broker, queues, jobs and sessions keep, and the process), then a
//! [`Collector`] writes it. No label has unbounded values: per-queue
//! series are the [`MAX_QUEUE_SERIES`] deepest queues, the rest summed
//! under `queue="other"`; there are no per-topic series.

use actix_web::{HttpResponse, web};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::credentials::Caller;
use super::{ApiError, AppState};
use crate::broker::QueueInfo;
use crate::broker::jobs::JobsInfo;
use crate::metrics::{Protocol, process};
use crate::protocol::frame::ErrorCode;

/// Most queues with series of their own.
pub const MAX_QUEUE_SERIES: usize = 100;

/// Everything one scrape reports, read before encoding.
#[derive(Debug, Default)]
struct Snapshot {
    connections: [u64; Protocol::ALL.len()],
    frames_in: [u64; Protocol::ALL.len()],
    bytes_in: [u64; Protocol::ALL.len()],
    sessions: [u64; 3],
    bytes_out: u64,
    rate_limited: u64,
    /// (publishes held, subscribers expelled) by `[mqtt] slow_subscriber`.
    mqtt_held: (u64, u64),
    published: u64,
    delivered: u64,
    dropped_slow: u64,
    dropped_outbound: u64,
    unrouted: u64,
    topics: u64,
    wildcard_subscriptions: u64,
    subscriptions: u64,
    retained: i64,
    writers: i64,
    parked: i64,
    /// (topics with history, messages they keep, messages written).
    history: (u64, u64, u64),
    queues: Vec<QueueInfo>,
    queue_count: u64,
    jobs: Option<JobsInfo>,
    handoffs: u64,
    requeues: u64,
    workers: u64,
    auth_failures: u64,
    auth_blocked: u64,
    /// `(reason, way, count)`.
    auth_denials: Vec<(&'static str, &'static str, u64)>,
    process: process::ProcessReading,
    store_bytes: Option<u64>,
    taskq: crate::broker::TaskqTotals,
    job_census: Vec<(String, crate::broker::jobs::JobStatus, u64)>,
    /// (sum, count, buckets) of the store's commit batch sizes and of its
    /// flush+fsync times.
    store_batch: Option<HistogramReading>,
    store_durable: Option<HistogramReading>,
    /// This node's view of its cluster, when it is in one.
    cluster: Option<crate::cluster::ClusterStatus>,
}

type HistogramReading = (f64, u64, Vec<(f64, u64)>);

/// Most job kinds with series of their own in `wharf_jobs_by_status`.
const MAX_KIND_SERIES: usize = 100;

/// `GET /metrics`. Needs the admin right (anonymous clients have it on a
/// loopback-only broker with no `[auth]`; give a scraper a token with
/// `admin = true`).
pub(crate) async fn get(
    caller: Caller,
    app: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    caller.require(crate::auth::Right::Admin)?;
    let snapshot = gather(&app).await;
    let mut registry = Registry::default();
    registry.register_collector(Box::new(WharfCollector(snapshot)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .map_err(|e| ApiError::coded(ErrorCode::Internal, format!("encoding metrics: {e}")))?;
    Ok(HttpResponse::Ok()
        .content_type("application/openmetrics-text; version=1.0.0; charset=utf-8")
        .body(text))
}

async fn gather(app: &AppState) -> Snapshot {
    let m = app.broker.metrics();
    let mut s = Snapshot::default();
    for p in Protocol::ALL {
        let i = p as usize;
        s.connections[i] = m.connections.get(p);
        s.frames_in[i] = m.frames_in.get(p);
        s.bytes_in[i] = m.bytes_in.get(p);
    }
    s.bytes_out = m.bytes_out.get();
    s.rate_limited = m.rate_limited.get();
    s.mqtt_held = (
        m.mqtt_publishes_held.get(),
        m.mqtt_subscribers_expelled.get(),
    );
    s.published = m.published.get();
    s.delivered = m.delivered.get();
    s.dropped_slow = m.dropped_slow.get();
    s.unrouted = m.unrouted.get();
    for info in app.sessions.list() {
        let i = match info.kind {
            "native" => 0,
            "mqtt" => 1,
            _ => 2,
        };
        s.sessions[i] += 1;
        s.dropped_outbound += info.outbound.dropped;
        s.subscriptions += u64::from(info.subscriptions);
    }
    s.retained = m.retained.load(std::sync::atomic::Ordering::Relaxed);
    s.writers = m.writers.load(std::sync::atomic::Ordering::Relaxed);
    s.parked = m.parked.load(std::sync::atomic::Ordering::Relaxed);
    let (topics, kept) = app.broker.history().summary().await;
    s.history = (topics as u64, kept as u64, m.history_written.get());
    let stats = app.broker.stats();
    s.topics = stats.topics as u64;
    s.wildcard_subscriptions = stats.wildcard_subscriptions as u64;
    let names = app.broker.queues().queue_names();
    s.queue_count = names.len() as u64;
    for name in names {
        if let Some(info) = app.broker.queues().queue_info(&name).await {
            s.queues.push(info);
        }
    }
    s.jobs = app.jobs.info().await.ok();
    s.job_census = app.jobs.census().await.unwrap_or_default();
    s.taskq = app.broker.taskq_totals();
    s.taskq.add(&app.jobs.taskq_stats());
    if let Some(st) = app.broker.store_stats() {
        s.store_batch = Some(st.batch.read());
        s.store_durable = Some(st.durable_seconds.read());
    }
    let sched = app.broker.scheduler_stats();
    s.handoffs = sched.handoffs;
    s.requeues = sched.requeues;
    s.workers = sched.workers as u64;
    s.auth_failures = app.auth.failures_total();
    s.auth_blocked = app.auth.blocked_total();
    s.auth_denials = app.auth.denials().series();
    if let Some(c) = &app.cluster {
        s.cluster = Some(c.status().await);
    }
    s.process = process::read();
    let dir = app.config.store.data_dir.clone();
    s.store_bytes = web::block(move || process::dir_bytes(&dir))
        .await
        .ok()
        .flatten();
    s
}

#[derive(Debug)]
struct WharfCollector(Snapshot);

mod cluster;

type Out = Result<(), std::fmt::Error>;

fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> Out {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)
}

fn gauge(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: i64) -> Out {
    let g = ConstGauge::new(v);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

fn counter_f(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: f64) -> Out {
    let c = ConstCounter::new(v);
    c.encode(enc.encode_descriptor(name, help, None, c.metric_type())?)
}

/// One counter family with a series per label value.
fn counters(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &str,
    series: &[(&str, u64)],
) -> Out {
    let kind = ConstCounter::new(0u64).metric_type();
    let mut family = enc.encode_descriptor(name, help, None, kind)?;
    for (value, v) in series {
        let labels = [(label, *value)];
        ConstCounter::new(*v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One counter family with a series per pair of label values.
fn counters2(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    labels: (&str, &str),
    series: &[(&str, &str, u64)],
) -> Out {
    let kind = ConstCounter::new(0u64).metric_type();
    let mut family = enc.encode_descriptor(name, help, None, kind)?;
    for (a, b, v) in series {
        let set = [(labels.0, *a), (labels.1, *b)];
        ConstCounter::new(*v).encode(family.encode_family(&set)?)?;
    }
    Ok(())
}

/// One gauge family with a series per label value (integers or floats).
fn gauges<N: EncodeGaugeValue + Copy>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    label: &str,
    series: &[(&str, N)],
) -> Out {
    let kind = prometheus_client::metrics::MetricType::Gauge;
    let mut family = enc.encode_descriptor(name, help, None, kind)?;
    for (value, v) in series {
        let labels = [(label, *value)];
        ConstGauge::new(*v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

/// One histogram, from its reading.
fn histogram(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, h: &HistogramReading) -> Out {
    let kind = prometheus_client::metrics::MetricType::Histogram;
    let (sum, count, buckets) = h;
    enc.encode_descriptor(name, help, None, kind)?
        .encode_histogram::<prometheus_client::encoding::NoLabelSet>(*sum, *count, buckets, None)
}

fn by_protocol(values: &[u64; Protocol::ALL.len()]) -> Vec<(&'static str, u64)> {
    Protocol::ALL
        .iter()
        .map(|p| (p.as_str(), values[*p as usize]))
        .collect()
}

impl Collector for WharfCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Out {
        let s = &self.0;
        let e = &mut enc;
        counters(
            e,
            "wharf_connections",
            "Connections accepted.",
            "protocol",
            &by_protocol(&s.connections),
        )?;
        counters(
            e,
            "wharf_frames_received",
            "WebSocket messages (or MQTT TCP reads) received.",
            "protocol",
            &by_protocol(&s.frames_in),
        )?;
        counters(
            e,
            "wharf_received_bytes",
            "Bytes received on WebSocket and MQTT connections.",
            "protocol",
            &by_protocol(&s.bytes_in),
        )?;
        counter(
            e,
            "wharf_sent_bytes",
            "Bytes written to WebSocket and MQTT connections.",
            s.bytes_out,
        )?;
        gauges(
            e,
            "wharf_sessions",
            "Live sessions.",
            "protocol",
            &[
                ("native", s.sessions[0] as i64),
                ("mqtt", s.sessions[1] as i64),
                ("socket", s.sessions[2] as i64),
            ],
        )?;
        counter(
            e,
            "wharf_rate_limited",
            "Frames refused (or connections closed) past the session rate.",
            s.rate_limited,
        )?;
        counter(
            e,
            "wharf_mqtt_publishes_held",
            "MQTT publishes whose acknowledgement waited for a QoS 1 or 2 subscriber \
             that was behind.",
            s.mqtt_held.0,
        )?;
        counter(
            e,
            "wharf_mqtt_subscribers_expelled",
            "MQTT subscribers disconnected for keeping a publisher waiting past \
             the hold timeout.",
            s.mqtt_held.1,
        )?;
        counter(
            e,
            "wharf_messages_published",
            "Messages published to topics, every way in.",
            s.published,
        )?;
        counter(
            e,
            "wharf_deliveries",
            "Deliveries queued to subscribers.",
            s.delivered,
        )?;
        counters(
            e,
            "wharf_deliveries_dropped",
            "Deliveries dropped, by reason.",
            "reason",
            &[
                ("slow_consumer", s.dropped_slow),
                ("outbound_evicted", s.dropped_outbound),
            ],
        )?;
        counter(
            e,
            "wharf_publishes_unrouted",
            "Publishes that reached no subscriber.",
            s.unrouted,
        )?;
        gauge(e, "wharf_topics", "Topics that exist now.", s.topics as i64)?;
        gauge(
            e,
            "wharf_retained_messages",
            "Retained messages held.",
            s.retained,
        )?;
        gauge(
            e,
            "wharf_connection_writers",
            "Connection writers running: one per WebSocket, one per MQTT/TCP connection with traffic in about the last second.",
            s.writers,
        )?;
        gauge(
            e,
            "wharf_connections_parked",
            "MQTT/TCP connections parked: quiet for [mqtt] park_after_ms, held out of any task.",
            s.parked,
        )?;
        gauge(
            e,
            "wharf_history_topics",
            "Topics that keep a history ([[history]]).",
            s.history.0 as i64,
        )?;
        gauge(
            e,
            "wharf_history_messages",
            "Messages kept in topics' history.",
            s.history.1 as i64,
        )?;
        counter(
            e,
            "wharf_history_written",
            "Topic history messages handed to the store.",
            s.history.2,
        )?;
        gauge(
            e,
            "wharf_subscriptions",
            "Topic subscriptions of live sessions (durable and shared ones included).",
            s.subscriptions as i64,
        )?;
        gauge(
            e,
            "wharf_wildcard_subscriptions",
            "Wildcard subscriptions.",
            s.wildcard_subscriptions as i64,
        )?;
        self.encode_queues(e)?;
        if let Some(j) = &s.jobs {
            gauges(
                e,
                "wharf_jobs",
                "Jobs held, by state.",
                "state",
                &[
                    ("all", j.jobs as i64),
                    ("ready", j.ready as i64),
                    ("running", j.running as i64),
                ],
            )?;
            gauge(
                e,
                "wharf_job_workers",
                "Registered job workers.",
                j.workers as i64,
            )?;
            gauge(
                e,
                "wharf_job_dequeues_waiting",
                "Dequeues waiting for a job.",
                j.waiting as i64,
            )?;
            counter(
                e,
                "wharf_job_lease_expiries",
                "Workers whose lease ran out (their jobs went back).",
                j.lease_expiries,
            )?;
            counter(
                e,
                "wharf_job_stale_outcomes",
                "Outcomes refused: a stale token or an expired worker.",
                j.stale_outcomes,
            )?;
            counter(
                e,
                "wharf_job_timeouts",
                "Attempts that ran past their execution timeout.",
                j.timeouts,
            )?;
        }
        self.encode_job_census(e)?;
        let t = &s.taskq;
        counters(
            e,
            "wharf_taskq_runs",
            "Tasks run, by where: inline on the submitting thread, or on a worker.",
            "where",
            &[("inline", t.inline_runs), ("worker", t.worker_runs)],
        )?;
        counter(
            e,
            "wharf_taskq_refused",
            "Submissions refused at max_depth (overloaded).",
            t.refused,
        )?;
        counter(e, "wharf_taskq_panics", "Tasks that panicked.", t.panics)?;
        gauge(
            e,
            "wharf_taskq_deepest",
            "The most tasks one resource holds now.",
            t.deepest as i64,
        )?;
        gauge(
            e,
            "wharf_taskq_deepest_ever",
            "The most tasks one resource ever held.",
            t.deepest_ever as i64,
        )?;
        if let Some(h) = &s.store_batch {
            histogram(
                e,
                "wharf_store_commit_batch",
                "Submissions per store commit group.",
                h,
            )?;
        }
        if let Some(c) = &s.cluster {
            cluster::cluster(e, c)?;
        }
        if let Some(h) = &s.store_durable {
            histogram(
                e,
                "wharf_store_durable_seconds",
                "Time to make a commit group durable (flush and fsync).",
                h,
            )?;
        }
        counter(
            e,
            "wharf_taskq_handoffs",
            "Resources handed to a worker past the capture threshold.",
            s.handoffs,
        )?;
        counter(
            e,
            "wharf_taskq_requeues",
            "Resources requeued by a worker at the end of its quantum.",
            s.requeues,
        )?;
        gauge(
            e,
            "wharf_taskq_workers",
            "Task-queue worker threads.",
            s.workers as i64,
        )?;
        counter(
            e,
            "wharf_auth_failures",
            "Failed authentications.",
            s.auth_failures,
        )?;
        counter(
            e,
            "wharf_auth_refused_blocked",
            "Authentications refused because the address failed too often.",
            s.auth_blocked,
        )?;
        counters2(
            e,
            "wharf_auth_denials",
            "Clients denied, by why (bad_credentials, blocked, busy, no_credentials_in_time) and way in (native, mqtt, http, socket).",
            ("reason", "way"),
            &s.auth_denials,
        )?;
        if let Some(b) = s.store_bytes {
            gauge(
                e,
                "wharf_store_disk_bytes",
                "Bytes of the store's files on disk.",
                b as i64,
            )?;
        }
        let p = &s.process;
        if let Some(v) = p.resident_bytes {
            gauge(
                e,
                "wharf_process_resident_memory_bytes",
                "Resident memory.",
                v as i64,
            )?;
        }
        if let Some(v) = p.cpu_seconds {
            counter_f(
                e,
                "wharf_process_cpu_seconds",
                "CPU time used, user and system.",
                v,
            )?;
        }
        if let Some(v) = p.open_fds {
            gauge(
                e,
                "wharf_process_open_fds",
                "Open file descriptors.",
                v as i64,
            )?;
        }
        if let Some(v) = p.threads {
            gauge(e, "wharf_process_threads", "Threads.", v as i64)?;
        }
        Ok(())
    }
}

impl WharfCollector {
    /// Jobs held by kind and status: the kinds with the most jobs, the
    /// rest under kind "other".
    fn encode_job_census(&self, e: &mut DescriptorEncoder<'_>) -> Out {
        use std::collections::BTreeMap;
        let mut per_kind: BTreeMap<&str, u64> = BTreeMap::new();
        for (kind, _, n) in &self.0.job_census {
            *per_kind.entry(kind).or_default() += n;
        }
        let mut kinds: Vec<(&str, u64)> = per_kind.into_iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let named: std::collections::HashSet<&str> =
            kinds.iter().take(MAX_KIND_SERIES).map(|k| k.0).collect();
        let mut rows: BTreeMap<(&str, &str), u64> = BTreeMap::new();
        for (kind, status, n) in &self.0.job_census {
            let kind = if named.contains(kind.as_str()) {
                kind.as_str()
            } else {
                "other"
            };
            *rows.entry((kind, status.as_str())).or_default() += n;
        }
        let kind = ConstGauge::new(0i64).metric_type();
        let mut family = e.encode_descriptor(
            "wharf_jobs_by_status",
            "Jobs held, by kind and status.",
            None,
            kind,
        )?;
        for ((k, st), n) in rows {
            let labels = [("kind", k), ("status", st)];
            ConstGauge::new(n as i64).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// Per-queue series for the deepest queues, the rest under "other".
    fn encode_queues(&self, e: &mut DescriptorEncoder<'_>) -> Out {
        let s = &self.0;
        gauge(
            e,
            "wharf_queues",
            "Queues that exist now.",
            s.queue_count as i64,
        )?;
        let mut queues: Vec<&QueueInfo> = s.queues.iter().collect();
        queues.sort_by(|a, b| b.depth.cmp(&a.depth).then_with(|| a.name.cmp(&b.name)));
        let (named, rest) = queues.split_at(queues.len().min(MAX_QUEUE_SERIES));
        let mut other = QueueInfo::default();
        for q in rest {
            other.ready += q.ready;
            other.in_flight += q.in_flight;
            other.delayed += q.delayed;
            other.on_disk += q.on_disk;
            other.consumers += q.consumers;
            other.stats.enqueued += q.stats.enqueued;
            other.stats.delivered += q.stats.delivered;
            other.stats.acked += q.stats.acked;
            other.stats.returned += q.stats.returned;
            other.stats.nacked += q.stats.nacked;
            other.stats.timed_out += q.stats.timed_out;
            other.stats.redelivered += q.stats.redelivered;
            other.stats.dead_lettered += q.stats.dead_lettered;
            other.stats.purged += q.stats.purged;
            other.stats.discarded += q.stats.discarded;
            other.stats.moved += q.stats.moved;
            other.oldest_enqueued_ms = match (other.oldest_enqueued_ms, q.oldest_enqueued_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let mut rows: Vec<(&str, &QueueInfo)> =
            named.iter().map(|q| (q.name.as_str(), *q)).collect();
        if !rest.is_empty() {
            rows.push(("other", &other));
        }
        let g = |f: fn(&QueueInfo) -> u64| -> Vec<(&str, i64)> {
            rows.iter().map(|(n, q)| (*n, f(q) as i64)).collect()
        };
        let c = |f: fn(&QueueInfo) -> u64| -> Vec<(&str, u64)> {
            rows.iter().map(|(n, q)| (*n, f(q))).collect()
        };
        gauges(
            e,
            "wharf_queue_ready",
            "Messages ready for delivery.",
            "queue",
            &g(|q| q.ready),
        )?;
        gauges(
            e,
            "wharf_queue_in_flight",
            "Deliveries waiting for an ack.",
            "queue",
            &g(|q| q.in_flight),
        )?;
        gauges(
            e,
            "wharf_queue_delayed",
            "Messages waiting for a delay or backoff.",
            "queue",
            &g(|q| q.delayed),
        )?;
        gauges(
            e,
            "wharf_queue_on_disk",
            "Messages held on disk only (past the memory window).",
            "queue",
            &g(|q| q.on_disk),
        )?;
        gauges(
            e,
            "wharf_queue_consumers",
            "Consumers.",
            "queue",
            &g(|q| q.consumers),
        )?;
        counters(
            e,
            "wharf_queue_enqueued",
            "Messages enqueued.",
            "queue",
            &c(|q| q.stats.enqueued),
        )?;
        counters(
            e,
            "wharf_queue_delivered",
            "Deliveries made.",
            "queue",
            &c(|q| q.stats.delivered),
        )?;
        counters(
            e,
            "wharf_queue_acked",
            "Deliveries acknowledged.",
            "queue",
            &c(|q| q.stats.acked),
        )?;
        counters(
            e,
            "wharf_queue_returned",
            "Deliveries given back (nack, timeout, consumer gone).",
            "queue",
            &c(|q| q.stats.returned),
        )?;
        counters(
            e,
            "wharf_queue_dead_lettered",
            "Messages moved to the dead-letter queue.",
            "queue",
            &c(|q| q.stats.dead_lettered),
        )?;
        counters(
            e,
            "wharf_queue_nacked",
            "Deliveries nacked by their consumer.",
            "queue",
            &c(|q| q.stats.nacked),
        )?;
        counters(
            e,
            "wharf_queue_ack_timeouts",
            "Deliveries not acked within the ack timeout.",
            "queue",
            &c(|q| q.stats.timed_out),
        )?;
        counters(
            e,
            "wharf_queue_redelivered",
            "Deliveries of messages delivered before.",
            "queue",
            &c(|q| q.stats.redelivered),
        )?;
        counters(
            e,
            "wharf_queue_discarded",
            "Messages deleted unconsumed: expired with expired = \"drop\", or dead-lettered without a dead-letter queue.",
            "queue",
            &c(|q| q.stats.discarded),
        )?;
        counters(
            e,
            "wharf_queue_purged",
            "Messages deleted by purges.",
            "queue",
            &c(|q| q.stats.purged),
        )?;
        counters(
            e,
            "wharf_queue_moved",
            "Messages taken to another queue (redrive or move).",
            "queue",
            &c(|q| q.stats.moved),
        )?;
        let now = crate::broker::now_ms();
        let ages: Vec<(&str, f64)> = rows
            .iter()
            .filter_map(|(n, q)| {
                let age = now.saturating_sub(q.oldest_enqueued_ms?);
                Some((*n, age as f64 / 1000.0))
            })
            .collect();
        gauges(
            e,
            "wharf_queue_oldest_message_age_seconds",
            "Age of the oldest message waiting in memory (ready or delayed).",
            "queue",
            &ages,
        )?;
        Ok(())
    }
}
