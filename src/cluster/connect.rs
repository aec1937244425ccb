//! How the link connects to NATS: the node's name, and the client's
//! options (servers, credentials, TLS, timeouts, reconnect callbacks)
//! from `[cluster]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::ClusterError;
use crate::config::ClusterConfig;

/// The node's name: configured, or the host's with a random suffix.
pub(super) fn node_name(config: &ClusterConfig) -> String {
    if !config.node.is_empty() {
        return config.node.clone();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| {
            h.trim()
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '-'
                    }
                })
                .collect::<String>()
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "wharf".into());
    let random = uuid::Uuid::now_v7().simple().to_string();
    format!("{host}-{}", &random[random.len() - 6..])
}

/// The NATS client's options; `online` is set by its connection events.
pub(super) async fn options(
    config: &ClusterConfig,
    node: &str,
    lost: Arc<AtomicU64>,
    online: Arc<tokio::sync::watch::Sender<bool>>,
) -> Result<async_nats::ConnectOptions, ClusterError> {
    let mut o = if !config.creds.as_os_str().is_empty() {
        async_nats::ConnectOptions::with_credentials_file(&config.creds)
            .await
            .map_err(|e| ClusterError::Setup {
                key: "creds",
                reason: format!("{}: {e}", config.creds.display()),
            })?
    } else {
        async_nats::ConnectOptions::new()
    };
    if !config.user.is_empty() {
        o = o.user_and_password(config.user.clone(), config.password.clone());
    }
    if !config.token.is_empty() {
        o = o.token(config.token.clone());
    }
    if !config.tls_ca.as_os_str().is_empty() {
        o = o.add_root_certificates(config.tls_ca.clone());
    }
    if !config.tls_cert.as_os_str().is_empty() {
        o = o.add_client_certificate(config.tls_cert.clone(), config.tls_key.clone());
    }
    let timeout = Duration::from_millis(config.connect_timeout_ms);
    o = o
        .require_tls(config.tls_required)
        .name(format!("wharf:{node}"))
        // A node's own publishes never come back to it.
        .no_echo()
        .connection_timeout(timeout)
        .subscription_capacity(config.inbound_buffer)
        .max_reconnects(None)
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis((100u64 << attempts.min(5) as u32).min(2_000))
        })
        .event_callback(move |event| {
            let (lost, online) = (lost.clone(), online.clone());
            async move {
                match event {
                    async_nats::Event::Connected => {
                        online.send_replace(true);
                        tracing::info!("cluster: connected to NATS");
                    }
                    async_nats::Event::Disconnected => {
                        online.send_replace(false);
                        tracing::warn!("cluster: NATS connection lost; local delivery carries on")
                    }
                    // One event per message the client dropped: counted,
                    // and said once per power of two.
                    async_nats::Event::SlowConsumer(_) => {
                        let n = lost.fetch_add(1, Ordering::Relaxed) + 1;
                        if n.is_power_of_two() {
                            tracing::warn!(
                                lost = n,
                                "cluster: this node fell behind the messages of other nodes \
                                 ([cluster] inbound_buffer is full); messages were lost"
                            );
                        }
                    }
                    other => tracing::info!("cluster: NATS: {other}"),
                }
            }
        });
    if !config.required {
        o = o.retry_on_initial_connect();
    }
    Ok(o)
}
