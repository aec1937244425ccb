//! Sessions: one per WebSocket connection. A session holds the client's
//! identity and subscriptions, answers its frames, and owns an outbound
//! queue ([`Outbound`]) that topics deliver into.
//!
//! [`Session::handle`] takes a decoded client frame and returns what the
//! connection must do next; replies go to the outbound queue. It never
//! touches the socket, so it is tested without one.

mod manager;
mod outbound;
mod rate;
pub mod wsframe;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use uuid::Uuid;

pub use manager::{SessionInfo, Sessions};
pub use outbound::{
    CloseRequest, Lane, OutFrame, Outbound, OutboundStats, OutboundStream, PushError,
    encoding_slot, next_sink_id,
};
pub use rate::{RateLimiter, Verdict};

// `Sink` for `Outbound::id`.
use crate::broker::{Broker, BrokerError, Publish, Sink as _, Subscription};
use crate::config::SessionConfig;
use crate::protocol::codec::{self, Format};
use crate::protocol::frame::{
    ClientFrame, ErrorCode, ErrorFrame, Limits, PROTOCOL_VERSION, Receipt, ServerFrame, Welcome,
};
use crate::routing;
use crate::taskq::TaskError;

/// What the connection does after a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Keep reading.
    Continue,
    /// Close the session (after draining the queue if `drain`).
    Close {
        /// Deliver queued frames first.
        drain: bool,
    },
}

/// One client's session.
pub struct Session {
    id: Uuid,
    client_id: String,
    broker: Broker,
    sessions: Sessions,
    out: Arc<Outbound>,
    config: SessionConfig,
    /// The session's subscriptions by id.
    subs: HashMap<String, Subscription>,
    frames: u64,
}

impl Session {
    /// A new session delivering through `out`, registered in `sessions`.
    pub fn new(
        broker: Broker,
        sessions: Sessions,
        out: Arc<Outbound>,
        config: SessionConfig,
    ) -> Self {
        let id = Uuid::now_v7();
        let client_id = format!("anon-{}", id.simple());
        sessions.insert(id, client_id.clone(), out.clone());
        Session {
            id,
            client_id,
            broker,
            sessions,
            out,
            config,
            subs: HashMap::new(),
            frames: 0,
        }
    }

    /// The server-chosen session id.
    pub fn id(&self) -> Uuid {
        self.id
    }

    /// The outbound queue.
    pub fn outbound(&self) -> &Arc<Outbound> {
        &self.out
    }

    fn reply(&self, format: Format, frame: ServerFrame) {
        // A closed session has no one to tell; a full one has its policy.
        let _ = self.out.push_frame(Lane::High, format, &frame);
    }

    /// Sends an `error` frame.
    pub fn error(
        &self,
        format: Format,
        code: ErrorCode,
        message: impl Into<String>,
        rid: Option<u64>,
    ) {
        self.reply(
            format,
            ServerFrame::Error(ErrorFrame {
                code,
                message: message.into(),
                rid,
            }),
        );
    }

    fn receipt(&self, format: Format, rid: Option<u64>) {
        if let Some(rid) = rid {
            self.reply(format, ServerFrame::Receipt(Receipt { rid }));
        }
    }

    fn broker_error(&self, format: Format, e: BrokerError, rid: Option<u64>) {
        let code = match &e {
            BrokerError::InvalidTopic(_) => ErrorCode::InvalidTopic,
            BrokerError::InvalidFilter(_) => ErrorCode::InvalidFilter,
            BrokerError::Task(TaskError::Overloaded { .. })
            | BrokerError::Contended
            | BrokerError::StoreBusy(_) => ErrorCode::Overloaded,
            BrokerError::TooManyTopics(_) => ErrorCode::TooManyTopics,
            BrokerError::Task(_) | BrokerError::Store(_) => ErrorCode::Internal,
        };
        self.error(format, code, e.to_string(), rid);
    }

    /// Handles one decoded frame that arrived in `format`.
    pub async fn handle(&mut self, format: Format, frame: ClientFrame) -> Next {
        self.frames += 1;
        self.out.set_notice_format(format);
        match frame {
            ClientFrame::Hello(h) => {
                if self.frames > 1 {
                    self.error(
                        format,
                        ErrorCode::UnexpectedHello,
                        "hello must be the first frame",
                        None,
                    );
                    return Next::Continue;
                }
                if h.version != PROTOCOL_VERSION {
                    self.error(
                        format,
                        ErrorCode::UnsupportedVersion,
                        format!(
                            "this server speaks version {PROTOCOL_VERSION}, not {}",
                            h.version
                        ),
                        None,
                    );
                    return Next::Continue;
                }
                if let Some(client_id) = h.client_id {
                    self.client_id = client_id;
                    self.sessions.set_client_id(self.id, self.client_id.clone());
                }
                self.reply(
                    format,
                    ServerFrame::Welcome(Welcome {
                        session: self.id.to_string(),
                        client_id: self.client_id.clone(),
                        version: PROTOCOL_VERSION,
                        limits: Limits {
                            max_frame: self.config.max_frame as u64,
                            max_payload: self.config.max_payload as u64,
                            outbound_limit: self.config.outbound_limit as u64,
                            rate_per_s: u64::from(self.config.rate_per_s),
                        },
                    }),
                );
            }
            ClientFrame::Subscribe(s) => {
                if let Err(e) = routing::validate_filter(&s.filter) {
                    self.error(
                        format,
                        ErrorCode::InvalidFilter,
                        format!("filter: {e}"),
                        s.rid,
                    );
                    return Next::Continue;
                }
                if self.subs.contains_key(&s.id) {
                    self.error(
                        format,
                        ErrorCode::DuplicateSubscription,
                        format!("subscription id {:?} is already in use", s.id),
                        s.rid,
                    );
                    return Next::Continue;
                }
                if self.subs.len() >= self.config.max_subscriptions {
                    self.error(
                        format,
                        ErrorCode::TooManySubscriptions,
                        format!(
                            "at most {} subscriptions per session",
                            self.config.max_subscriptions
                        ),
                        s.rid,
                    );
                    return Next::Continue;
                }
                let sub = Subscription::new(
                    self.out.clone(),
                    &s.id,
                    &s.filter,
                    codec::message_prefix(format, &s.id),
                    encoding_slot(format),
                );
                match self.broker.subscribe(sub.clone()).await {
                    Ok(()) => {
                        self.subs.insert(s.id, sub);
                        self.receipt(format, s.rid);
                    }
                    Err(e) => self.broker_error(format, e, s.rid),
                }
            }
            ClientFrame::Unsubscribe(u) => match self.subs.remove(&u.id) {
                None => self.error(
                    format,
                    ErrorCode::UnknownSubscription,
                    format!("no subscription {:?}", u.id),
                    u.rid,
                ),
                Some(sub) => {
                    // Effective at once; the topics drop it as they can.
                    sub.cancel();
                    if let Err(e) = self
                        .broker
                        .unsubscribe(self.out.id(), &u.id, &sub.filter)
                        .await
                    {
                        tracing::debug!(sub = %u.id, "unsubscribe left for the topics to tidy: {e}");
                    }
                    self.receipt(format, u.rid);
                }
            },
            ClientFrame::Publish(p) => {
                if p.payload.len() > self.config.max_payload {
                    self.error(
                        format,
                        ErrorCode::PayloadTooLarge,
                        format!(
                            "payload of {} bytes is over the {}-byte limit",
                            p.payload.len(),
                            self.config.max_payload
                        ),
                        p.rid,
                    );
                    return Next::Continue;
                }
                let msg = Publish {
                    topic: p.topic,
                    payload: Bytes::from(p.payload),
                    headers: p.headers,
                    retain: p.retain,
                    priority: p.priority,
                };
                match self.broker.publish(msg).await {
                    Ok(_) => self.receipt(format, p.rid),
                    Err(e) => self.broker_error(format, e, p.rid),
                }
            }
            ClientFrame::Ping(p) => self.reply(format, ServerFrame::Pong(p)),
            ClientFrame::Close(c) => return Next::Close { drain: c.drain },
        }
        Next::Continue
    }

    /// Ends the session: drops its subscriptions and leaves the registry.
    pub async fn end(mut self) {
        let sink = self.out.id();
        for (id, sub) in std::mem::take(&mut self.subs) {
            sub.cancel();
            let _ = self.broker.unsubscribe(sink, &id, &sub.filter).await;
        }
        self.sessions.remove(self.id);
    }
}
