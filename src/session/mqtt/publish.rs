//! PUBLISH from the client: topic aliases (MQTT 5), permission, QoS 1
//! and 2 acknowledgements with their reason codes, and the hand-over to
//! the broker with the MQTT 5 properties as headers.

use super::*;
use crate::broker::Hold;

/// `ack` (PUBACK, PUBREC, PUBREL or PUBCOMP) with the MQTT 5 reason
/// `code`.
pub(super) fn ack_with(mut ack: Packet, code: u8) -> Packet {
    if let Packet::PubAck(a) | Packet::PubRec(a) | Packet::PubRel(a) | Packet::PubComp(a) = &mut ack
    {
        a.reason = code;
    }
    ack
}

/// The reason code acknowledging a publish with `outcome`: no matching
/// subscribers when nobody took it (MQTT 5; not sent at 3.1.1).
fn ack_reason(outcome: &PublishOutcome) -> u8 {
    if outcome.delivered == 0 && outcome.dropped == 0 {
        reason::NO_MATCHING_SUBSCRIBERS
    } else {
        reason::SUCCESS
    }
}

impl MqttSession {
    pub(super) async fn publish(&mut self, mut p: mqtt::PublishPacket) -> Result<(), MqttClose> {
        let v5 = self.sink.level() == mqtt::LEVEL_5;
        if v5 {
            self.resolve_alias(&mut p)?;
        }
        if let Err(e) = self.broker.topic_limits().check_topic(&p.topic) {
            return Err(violation_v5(
                reason::TOPIC_NAME_INVALID,
                format!("PUBLISH to an invalid topic: {e}"),
            ));
        }
        if p.payload.len() > self.cfg.max_payload {
            return Err(MqttClose {
                code: 1009,
                reason: format!("payload over the {}-byte limit", self.cfg.max_payload),
                mqtt: None,
            });
        }
        // What the acknowledgement says when the publish is refused: MQTT
        // 5 names the reason; 3.1.1 has no refusal, so the packet is
        // acknowledged as usual and dropped, with a log line.
        let refusal = if !self.may_publish(&p.topic) {
            tracing::info!(
                principal = self.principal.as_ref().map(|p| p.id()),
                topic = %p.topic,
                "MQTT publish refused: not allowed"
            );
            Some(reason::NOT_AUTHORIZED)
        } else if v5
            && p.props.payload_format_indicator == Some(true)
            && std::str::from_utf8(&p.payload).is_err()
        {
            Some(reason::PAYLOAD_FORMAT_INVALID)
        } else {
            None
        };
        if let Some(code) = refusal {
            match (p.qos, p.pid) {
                (1, Some(pid)) => self.sink.push(&ack_with(Packet::puback(pid), code)),
                (2, Some(pid)) => self.sink.push(&ack_with(Packet::pubrec(pid), code)),
                _ => {}
            }
            return Ok(());
        }
        if p.qos == 2 {
            let pid = p.pid.unwrap_or(0);
            let fresh = match self.connected.as_mut() {
                Some(c) => {
                    if c.rare().awaiting_rel.len() >= usize::from(u16::MAX) {
                        return Err(violation_v5(
                            reason::RECEIVE_MAXIMUM_EXCEEDED,
                            "too many QoS 2 publishes awaiting PUBREL",
                        ));
                    }
                    c.rare_mut().awaiting_rel.insert(pid)
                }
                None => false,
            };
            // A repeated packet id is the same message: published once.
            let mut code = reason::SUCCESS;
            if fresh {
                match self.publish_to_broker(&p).await {
                    Ok(o) => {
                        code = ack_reason(&o);
                        self.hold(o.hold).await;
                    }
                    Err(refused) => {
                        if let Some(c) = self.connected.as_mut() {
                            c.released(pid);
                        }
                        // 3.1.1: no acknowledgement, the client sends it
                        // again; MQTT 5 says why.
                        if v5 {
                            self.sink.push(&ack_with(Packet::pubrec(pid), refused));
                        }
                        return Ok(());
                    }
                }
            }
            self.sink.push(&ack_with(Packet::pubrec(pid), code));
            return Ok(());
        }
        let published = self.publish_to_broker(&p).await;
        if p.qos == 1 {
            let pid = p.pid.unwrap_or(0);
            match published {
                Ok(o) => {
                    let code = ack_reason(&o);
                    self.hold(o.hold).await;
                    self.sink.push(&ack_with(Packet::puback(pid), code));
                }
                Err(code) if v5 => self.sink.push(&ack_with(Packet::puback(pid), code)),
                Err(_) => {}
            }
        }
        Ok(())
    }

    /// Applies `[mqtt]`'s policy for subscribers that fall behind: to this
    /// connection's subscriptions, and to its publishes held for others.
    pub fn with_flow(self, flow: Flow) -> Self {
        self.sink.state.lock().set_flow(&flow);
        MqttSession {
            hold_ms: flow.hold_ms(),
            ..self
        }
    }

    /// Waits, before the acknowledgement and before anything more is
    /// read from the client, until the subscribers the publish crowded
    /// have room (`[mqtt] slow_subscriber = "hold"`), at most the hold
    /// timeout. The wait is the broker's, not the client's silence: the
    /// keep-alive counts from its end.
    async fn hold(&mut self, hold: Hold) {
        if hold.is_empty() {
            return;
        }
        self.broker.metrics().mqtt_publishes_held.add(1);
        let timeout = std::time::Duration::from_millis(u64::from(self.hold_ms));
        Box::pin(hold.wait(&*self.sink, timeout)).await;
        self.last_packet = super::Stamp::now();
    }

    /// MQTT 5 topic aliases from the client: an alias with a topic sets
    /// it, an alias alone stands for the topic it was set to.
    fn resolve_alias(&mut self, p: &mut mqtt::PublishPacket) -> Result<(), MqttClose> {
        let Some(alias) = p.props.topic_alias else {
            return Ok(());
        };
        if alias == 0 || alias > connect::TOPIC_ALIAS_MAX {
            return Err(violation_v5(
                reason::TOPIC_ALIAS_INVALID,
                format!(
                    "topic alias {alias} is over the maximum of {}",
                    connect::TOPIC_ALIAS_MAX
                ),
            ));
        }
        let Some(conn) = self.connected.as_mut() else {
            return Ok(());
        };
        if p.topic.is_empty() {
            match conn.rare().aliases_in.get(&alias) {
                Some(t) => p.topic.clone_from(t),
                None => {
                    return Err(violation_v5(
                        reason::PROTOCOL_ERROR,
                        format!("topic alias {alias} was never set"),
                    ));
                }
            }
        } else {
            conn.rare_mut().aliases_in.insert(alias, p.topic.clone());
        }
        Ok(())
    }

    /// Publishes; the broker's outcome, or the MQTT 5 reason code of a
    /// refusal (no acknowledgement at 3.1.1 then: the client sends it
    /// again).
    async fn publish_to_broker(&self, p: &mqtt::PublishPacket) -> Result<PublishOutcome, u8> {
        let msg = Publish {
            topic: p.topic.clone(),
            payload: p.payload.clone(),
            headers: if p.props.is_empty() {
                crate::protocol::frame::Headers::new()
            } else {
                v5::headers_of(&p.props)
            },
            retain: p.retain,
            priority: Priority::Normal,
            qos: p.qos,
            origin: self.sink.id,
        };
        let source = crate::broker::Source {
            ingress: crate::broker::Ingress::Mqtt,
            client_id: self.connected.as_ref().map(|c| c.client_id()),
            principal: self.principal.as_ref().map(|p| p.name()),
        };
        self.broker.publish_from(msg, &source).await.map_err(|e| {
            tracing::debug!(topic = %p.topic, "MQTT publish refused: {e}");
            match e {
                crate::broker::BrokerError::TooManyTopics(_)
                | crate::broker::BrokerError::StoreBusy(_)
                | crate::broker::BrokerError::QueueFull(_) => reason::QUOTA_EXCEEDED,
                _ => reason::UNSPECIFIED_ERROR,
            }
        })
    }
}
