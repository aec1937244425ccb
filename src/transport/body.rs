//! Reading HTTP request bodies, bounded three ways: in size (the route's
//! limit), in time (`server.body_timeout_s` for the whole body, so a client
//! sending a byte at a time is cut), and in how many are read at once
//! (`server.max_body_reads`, so slow clients cannot hold every worker).

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::web;
use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use tokio::sync::Semaphore;

use super::ApiError;
use super::error::HttpCode;
use crate::config::ServerConfig;
use crate::protocol::frame::ErrorCode;

/// Reads request bodies under the server's time and concurrency bounds;
/// shared by every route that takes a body.
#[derive(Clone, Debug)]
pub struct BodyReader {
    timeout: Duration,
    slots: Arc<Semaphore>,
}

impl BodyReader {
    /// The bounds of `[server]`.
    pub fn new(cfg: &ServerConfig) -> BodyReader {
        BodyReader {
            timeout: Duration::from_secs(cfg.body_timeout_s),
            slots: Arc::new(Semaphore::new(cfg.max_body_reads)),
        }
    }

    /// Reads a body of at most `limit` bytes.
    ///
    /// # Errors
    /// `413 payload_too_large` past `limit`; `408 body_timeout` when the
    /// whole body has not arrived within `body_timeout_s`; `503
    /// overloaded` when `max_body_reads` bodies are being read already;
    /// `400 bad_body` when the connection fails mid-body.
    pub async fn read(&self, body: &mut web::Payload, limit: usize) -> Result<Bytes, ApiError> {
        let Ok(_slot) = self.slots.try_acquire() else {
            return Err(ApiError::coded(
                ErrorCode::Overloaded,
                "too many request bodies are being read at once ([server] max_body_reads); \
                 try again"
                    .into(),
            ));
        };
        match tokio::time::timeout(self.timeout, read_all(body, limit)).await {
            Ok(read) => read,
            Err(_) => Err(ApiError::http(
                HttpCode::BodyTimeout,
                format!(
                    "the request body did not arrive within {} s ([server] body_timeout_s)",
                    self.timeout.as_secs()
                ),
            )),
        }
    }
}

async fn read_all(body: &mut web::Payload, limit: usize) -> Result<Bytes, ApiError> {
    let mut payload = BytesMut::new();
    while let Some(chunk) = poll_fn(|cx| Pin::new(&mut *body).poll_next(cx)).await {
        let chunk = chunk.map_err(|e| ApiError::http(HttpCode::BadBody, e.to_string()))?;
        if payload.len() + chunk.len() > limit {
            return Err(ApiError::coded(
                ErrorCode::PayloadTooLarge,
                format!("payload is over the {limit}-byte limit"),
            ));
        }
        payload.extend_from_slice(&chunk);
    }
    Ok(payload.freeze())
}
