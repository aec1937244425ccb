//! # Wharf
//!
//! A message broker on actix: topics, durable queues, durable topic
//! subscriptions, transactions, and jobs with workers, over WebSocket (its
//! native protocol and MQTT), MQTT over TCP and TLS (5, 3.1.1 and 3.1) and
//! HTTP, persisted to sled. Run it as the `wharf` binary or embed it in an
//! actix-web app ([`Wharf`]).
//!
//! # Layout
//!
//! - [`taskq`]: the non-blocking resource task queue every topic and queue
//!   owns its state through, and its worker pool. Knows nothing of messages.
//! - [`config`]: the TOML configuration, its defaults (the shipped
//!   `config.toml`, embedded) and its validation.
//! - [`broker`]: topics and queues as task-queue resources, their
//!   registries, fan-out; queue dispatch, acks, dead letters, topic
//!   bindings, durable subscriptions (queues named
//!   `$durable/<client id>/<subscription id>`, bound to their filter),
//!   transactions (`Broker::commit`), and the jobs resource
//!   ([`broker::jobs`]).
//! - [`routing`]: topic names, filters, their limits and the filter trie.
//! - [`protocol`]: frame types and codecs, pure (no I/O): the native
//!   protocol (JSON and bincode), its job frames, and MQTT (5, 3.1.1, 3.1).
//! - [`session`]: per-connection state (native: one function per
//!   operation in `session::ops`; MQTT: `session::mqtt`), the bounded
//!   two-lane outbound queue and its frame writer, the slow-consumer
//!   policy, transactions in progress, the registry.
//! - [`store`]: persistence on sled (retained messages, queues and their
//!   messages, durable subscriptions' bindings); the only module that
//!   knows sled.
//! - [`auth`]: who a client is (tokens, users and passwords, JWTs) and
//!   what it may do (per-topic and per-queue grants, the admin right),
//!   with the failed-login limit.
//! - [`rules`]: routing rules (`[[rules]]`): matcher trees and actions
//!   (republish, enqueue, edit headers, drop, forward to HTTP backends).
//! - [`cluster`]: nodes joined through NATS: topics shared, queue and job
//!   calls forwarded to each queue's home node.
//! - [`sockets`]: typed sockets, an embedding app's own socket kinds on
//!   Wharf's session machinery.
//! - [`metrics`]: the Prometheus registry and the counters the broker
//!   keeps (`/metrics`).
//! - [`tls`]: the TLS server configuration (`[server.tls]`), for https,
//!   wss and MQTT over TLS.
//! - [`transport`]: actix-web routes (`/health`, `/ws`, `/mqtt`,
//!   `/topics`, `/queues`, `/jobs`, `/workers`, `/admin/sessions`,
//!   `/admin/jobs`) and the mapping of errors to HTTP responses.
//! - `client` (default feature): an async Rust client for the native
//!   protocol (topics, queues, durable subscriptions, transactions, jobs)
//!   and a small MQTT-over-WebSocket client.
//! - [`Wharf`]: the broker embedded in your own Actix app (mount its
//!   routes, publish, subscribe your actors). Its queue half, in
//!   `embed::queues`: enqueue, and consume a queue with an actor, which
//!   gets each delivery as a [`QueueMessage`] and settles it through its
//!   [`Settler`] ([`ActorConsumer`] ends it).
//! - [`run`]: serve on a listener until a shutdown future completes.
//!
//! The binary (`src/main.rs`) only parses the command line, loads the
//! config, installs logging and signal handling, and calls [`run`].

#![deny(missing_docs)]
// In the library `unsafe` lives only in the task queue (`taskq`: its claim
// protocol and `taskq/task.rs`'s type-erased task slots, each block with a
// SAFETY note, model-checked by loom): everywhere else it does not
// compile. The binary has one more module with it, `alloc_tidy.rs`
// (mimalloc's collect and option calls).
#![deny(unsafe_code)]

pub mod auth;
pub mod broker;
#[cfg(feature = "client")]
pub mod client;
pub mod cluster;
pub mod config;
mod embed;
mod maps;
pub mod metrics;
pub mod protocol;
pub mod routing;
pub mod rules;
mod server;
pub mod session;
pub mod sockets;
pub mod store;
#[allow(unsafe_code)]
pub mod taskq;
mod tidy;
pub mod tls;
pub mod transport;
mod wsframe;

pub use config::Config;
pub use embed::{
    ActorConsumer, ActorSubscription, Delivery, Error, JobHandler, JobWorkers, QueueMessage,
    Settler, Wharf, WharfBuilder, check_config,
};
pub use server::{Listeners, run, run_with_reload, serve};
pub use tidy::set_worker_tidy;

/// README.md's code blocks, compiled as doc tests: a snippet that drifts
/// from the API fails CI.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
