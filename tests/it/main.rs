//! Every integration test of Wharf in one test binary.
//!
//! One binary rather than one per file: each test binary links the whole
//! broker and its dependencies, so twenty-odd of them cost minutes of
//! linking on two cores and gigabytes of disk. nextest still runs every
//! test in a process of its own; `cargo nextest run -E 'test(/^ws::/)'`
//! runs one file's tests.

mod common;

mod admin;
mod auth;
mod cli;
mod cluster;
mod cluster_conflicts;
mod cluster_failover;
mod cluster_interest;
mod cluster_jobs_failover;
mod cluster_kill;
mod crash;
mod dashboard;
mod embed;
mod fuzz;
mod hardening;
mod history;
mod jobs;
mod metrics;
mod mqtt;
mod mqtt5;
mod mqtt_tcp;
mod operator;
mod presence;
mod protocol;
mod queues;
mod rate;
mod rules;
mod rules_forward;
mod server;
mod slow_subscriber;
mod sse;
mod store_damage;
mod taskq;
mod tls;
mod txn;
mod typed_sockets;
mod upgrade;
mod ws;
mod ws_errors;
