//! A small MQTT 3.1.1 client over WebSocket (`ws://`, `wss://`) or plain
//! TCP (`mqtt://host:port`): enough for the tests and the benchmark to
//! drive Wharf's `/mqtt` endpoint and MQTT listener (or any broker's) with
//! the same code. It answers the broker's QoS 1 and 2 deliveries itself;
//! publishes with QoS 1 and 2 wait for their acknowledgement.

use std::collections::VecDeque;
use std::time::Duration;

use actix_http::ws;
use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ClientError;
use super::handshake::{self, Connection};
use crate::protocol::mqtt::{self, ConnAck, Connect, Packet, PublishPacket, Will};

/// The client speaks MQTT 3.1.1 after CONNECT (3.1 is the same there).
const LEVEL: u8 = mqtt::LEVEL_3_1_1;

/// How the packets travel.
enum Link {
    /// In binary WebSocket messages.
    Ws(Box<Connection>),
    /// On a TCP stream, with the bytes fed but not yet written.
    Tcp(tokio::net::TcpStream, BytesMut),
}

/// An MQTT connection. Not `Send`: it lives on the actix thread that made
/// it.
pub struct MqttClient {
    conn: Link,
    buf: BytesMut,
    next_pid: u16,
    /// Deliveries read while waiting for something else.
    inbox: VecDeque<PublishPacket>,
    timeout: Duration,
    /// CONNACK's session-present flag.
    pub session_present: bool,
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct MqttOptions {
    /// Client id.
    pub client_id: String,
    /// Clean session.
    pub clean: bool,
    /// Keep-alive (s).
    pub keep_alive: u16,
    /// Will.
    pub will: Option<Will>,
    /// User name and password.
    pub credentials: Option<(String, String)>,
    /// How long any wait lasts.
    pub timeout: Duration,
    /// Protocol level sent in CONNECT (4: MQTT 3.1.1).
    pub level: u8,
    /// What to trust for `wss://` URLs (`wharf::tls::client_config(ca)`).
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Default for MqttOptions {
    fn default() -> Self {
        MqttOptions {
            client_id: String::new(),
            clean: true,
            keep_alive: 60,
            will: None,
            credentials: None,
            timeout: Duration::from_secs(10),
            level: 4,
            tls: None,
        }
    }
}

impl MqttClient {
    /// Connects to `url` (`ws://host:port/mqtt` with subprotocol `mqtt`,
    /// or `mqtt://host:port` over TCP) and sends CONNECT; returns once
    /// CONNACK accepts.
    ///
    /// # Errors
    /// A failed connection, a refusing CONNACK (its code in the message),
    /// or a timeout.
    pub async fn connect(url: &str, o: MqttOptions) -> Result<MqttClient, ClientError> {
        let conn = actix_rt::time::timeout(o.timeout, async {
            match url.strip_prefix("mqtt://") {
                Some(addr) => {
                    let addr = addr.trim_end_matches('/');
                    let stream = tokio::net::TcpStream::connect(addr)
                        .await
                        .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
                    let _ = stream.set_nodelay(true);
                    Ok(Link::Tcp(stream, BytesMut::new()))
                }
                None => handshake::connect(url, "mqtt", 16 << 20, o.tls.as_ref())
                    .await
                    .map(|c| Link::Ws(Box::new(c))),
            }
        })
        .await
        .map_err(|_| ClientError::Timeout(o.timeout))??;
        let mut c = MqttClient {
            conn,
            buf: BytesMut::new(),
            next_pid: 0,
            inbox: VecDeque::new(),
            timeout: o.timeout,
            session_present: false,
        };
        let (username, password) = match o.credentials {
            Some((u, p)) => (Some(u), Some(Bytes::from(p))),
            None => (None, None),
        };
        c.send(&Packet::Connect(Box::new(Connect {
            level: o.level,
            client_id: o.client_id,
            clean_session: o.clean,
            keep_alive: o.keep_alive,
            will: o.will,
            username,
            password,
            props: Default::default(),
        })))
        .await?;
        match c.next_control().await? {
            Packet::ConnAck(ConnAck {
                session_present,
                code: 0,
                ..
            }) => {
                c.session_present = session_present;
                Ok(c)
            }
            Packet::ConnAck(ConnAck { code, .. }) => Err(ClientError::Connect(format!(
                "CONNACK refused with code {code}"
            ))),
            other => Err(ClientError::Connect(format!(
                "expected CONNACK, got {other:?}"
            ))),
        }
    }

    fn pid(&mut self) -> u16 {
        self.next_pid = self.next_pid.wrapping_add(1).max(1);
        self.next_pid
    }

    async fn send(&mut self, p: &Packet) -> Result<(), ClientError> {
        self.feed(p).await?;
        self.flush().await
    }

    async fn feed(&mut self, p: &Packet) -> Result<(), ClientError> {
        match &mut self.conn {
            Link::Ws(conn) => {
                let mut buf = BytesMut::new();
                mqtt::encode(p, &mut buf, LEVEL);
                conn.feed(ws::Message::Binary(buf.freeze()))
                    .await
                    .map_err(|_| ClientError::Closed)
            }
            Link::Tcp(_, out) => {
                mqtt::encode(p, out, LEVEL);
                Ok(())
            }
        }
    }

    async fn flush(&mut self) -> Result<(), ClientError> {
        match &mut self.conn {
            Link::Ws(conn) => conn.flush().await.map_err(|_| ClientError::Closed),
            Link::Tcp(stream, out) => {
                if out.is_empty() {
                    return Ok(());
                }
                let r = stream.write_all(out).await;
                out.clear();
                r.map_err(|_| ClientError::Closed)
            }
        }
    }

    /// Reads more bytes into the buffer; `Ok(false)` once the broker closed.
    async fn fill(&mut self) -> Result<bool, ClientError> {
        let timeout = self.timeout;
        match &mut self.conn {
            Link::Ws(conn) => loop {
                let frame = actix_rt::time::timeout(timeout, conn.next())
                    .await
                    .map_err(|_| ClientError::Timeout(timeout))?;
                match frame {
                    Some(Ok(ws::Frame::Binary(b))) => {
                        self.buf.extend_from_slice(&b);
                        return Ok(true);
                    }
                    Some(Ok(ws::Frame::Ping(b))) => {
                        let _ = conn.send(ws::Message::Pong(b)).await;
                    }
                    Some(Ok(ws::Frame::Close(_))) | Some(Err(_)) | None => return Ok(false),
                    Some(Ok(_)) => {}
                }
            },
            Link::Tcp(stream, _) => {
                self.buf.reserve(64 << 10);
                let n = actix_rt::time::timeout(timeout, stream.read_buf(&mut self.buf))
                    .await
                    .map_err(|_| ClientError::Timeout(timeout))?;
                Ok(matches!(n, Ok(n) if n > 0))
            }
        }
    }

    /// The next packet from the broker (answering deliveries' QoS flows).
    async fn read(&mut self) -> Result<Packet, ClientError> {
        loop {
            if let Some(p) = mqtt::decode(&mut self.buf, 16 << 20, LEVEL)
                .map_err(|e| ClientError::Connect(e.to_string()))?
            {
                return Ok(p);
            }
            // Acknowledgements fed since the last read go out together.
            self.flush().await?;
            if !self.fill().await? {
                return Err(ClientError::Closed);
            }
        }
    }

    /// Handles a delivery's QoS flow and keeps it; returns other packets.
    async fn next_control(&mut self) -> Result<Packet, ClientError> {
        loop {
            match self.read().await? {
                Packet::Publish(p) => self.take_delivery(p).await?,
                Packet::PubRel(a) => self.send(&Packet::pubcomp(a.pid)).await?,
                other => return Ok(other),
            }
        }
    }

    async fn take_delivery(&mut self, p: PublishPacket) -> Result<(), ClientError> {
        // Fed, not flushed: the next read flushes them all at once.
        match (p.qos, p.pid) {
            (1, Some(pid)) => self.feed(&Packet::puback(pid)).await?,
            (2, Some(pid)) => self.feed(&Packet::pubrec(pid)).await?,
            _ => {}
        }
        self.inbox.push_back(p);
        Ok(())
    }

    /// Publishes; QoS 1 and 2 wait for the broker's acknowledgement.
    ///
    /// # Errors
    /// A closed connection or a timeout.
    pub async fn publish(
        &mut self,
        topic: &str,
        payload: impl Into<Bytes>,
        qos: u8,
        retain: bool,
    ) -> Result<(), ClientError> {
        let pid = (qos > 0).then(|| self.pid());
        self.send(&Packet::Publish(PublishPacket {
            dup: false,
            qos,
            retain,
            topic: topic.to_owned(),
            pid,
            payload: payload.into(),
            props: Default::default(),
        }))
        .await?;
        let Some(pid) = pid else {
            return Ok(());
        };
        loop {
            match self.next_control().await? {
                Packet::PubAck(a) if a.pid == pid && qos == 1 => return Ok(()),
                Packet::PubRec(a) if a.pid == pid && qos == 2 => {
                    self.send(&Packet::pubrel(pid)).await?;
                }
                Packet::PubComp(a) if a.pid == pid && qos == 2 => return Ok(()),
                _ => {}
            }
        }
    }

    /// Publishes `n` QoS 0 messages in one write (pipelined).
    ///
    /// # Errors
    /// A closed connection.
    pub async fn publish_batch(
        &mut self,
        topic: &str,
        payloads: &[Bytes],
    ) -> Result<(), ClientError> {
        for p in payloads {
            self.feed(&Packet::Publish(PublishPacket {
                dup: false,
                qos: 0,
                retain: false,
                topic: topic.to_owned(),
                pid: None,
                payload: p.clone(),
                props: Default::default(),
            }))
            .await?;
        }
        self.flush().await
    }

    /// Publishes `payloads` with QoS 1, up to `window` unacknowledged at a
    /// time; returns once every one is acknowledged.
    ///
    /// # Errors
    /// A closed connection or a timeout.
    pub async fn publish_qos1_pipelined(
        &mut self,
        topic: &str,
        payloads: &[Bytes],
        window: usize,
    ) -> Result<(), ClientError> {
        let mut waiting = std::collections::HashSet::new();
        let mut next = 0;
        while next < payloads.len() || !waiting.is_empty() {
            while next < payloads.len() && waiting.len() < window.max(1) {
                let pid = self.pid();
                self.feed(&Packet::Publish(PublishPacket {
                    dup: false,
                    qos: 1,
                    retain: false,
                    topic: topic.to_owned(),
                    pid: Some(pid),
                    payload: payloads[next].clone(),
                    props: Default::default(),
                }))
                .await?;
                waiting.insert(pid);
                next += 1;
            }
            if let Packet::PubAck(a) = self.next_control().await? {
                waiting.remove(&a.pid);
            }
        }
        Ok(())
    }

    /// Subscribes; returns the granted QoS (0x80: refused).
    ///
    /// # Errors
    /// A closed connection or a timeout.
    pub async fn subscribe(&mut self, filter: &str, qos: u8) -> Result<u8, ClientError> {
        let pid = self.pid();
        self.send(&Packet::subscribe(pid, vec![(filter.to_owned(), qos)]))
            .await?;
        loop {
            if let Packet::SubAck(a) = self.next_control().await? {
                if a.pid == pid {
                    return Ok(a.codes.first().copied().unwrap_or(mqtt::SUBACK_FAILURE));
                }
            }
        }
    }

    /// The next delivery (its QoS flow answered).
    ///
    /// # Errors
    /// A closed connection or a timeout.
    pub async fn recv(&mut self) -> Result<PublishPacket, ClientError> {
        loop {
            if let Some(p) = self.inbox.pop_front() {
                return Ok(p);
            }
            match self.read().await? {
                Packet::Publish(p) => self.take_delivery(p).await?,
                Packet::PubRel(a) => self.send(&Packet::pubcomp(a.pid)).await?,
                // Control packets nobody waits for (late acks) are dropped.
                _ => {}
            }
        }
    }

    /// Sends raw bytes in one binary frame, or one write over TCP (tests
    /// of malformed input).
    ///
    /// # Errors
    /// A closed connection.
    pub async fn send_raw(&mut self, bytes: Bytes) -> Result<(), ClientError> {
        match &mut self.conn {
            Link::Ws(conn) => conn
                .send(ws::Message::Binary(bytes))
                .await
                .map_err(|_| ClientError::Closed),
            Link::Tcp(stream, _) => stream
                .write_all(&bytes)
                .await
                .map_err(|_| ClientError::Closed),
        }
    }

    /// Waits for the connection to close; the WebSocket close code, if
    /// any (over TCP: `None` once closed).
    pub async fn closed(&mut self) -> Option<u16> {
        let timeout = self.timeout;
        let Link::Ws(conn) = &mut self.conn else {
            while let Ok(true) = self.fill().await {}
            return None;
        };
        loop {
            match actix_rt::time::timeout(timeout, conn.next()).await {
                Ok(Some(Ok(ws::Frame::Close(reason)))) => return reason.map(|r| r.code.into()),
                Ok(Some(Ok(ws::Frame::Ping(b)))) => {
                    let _ = conn.send(ws::Message::Pong(b)).await;
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_))) | Ok(None) | Err(_) => return None,
            }
        }
    }

    /// PINGREQ and its PINGRESP.
    ///
    /// # Errors
    /// A closed connection or a timeout.
    pub async fn ping(&mut self) -> Result<(), ClientError> {
        self.send(&Packet::PingReq).await?;
        loop {
            if self.next_control().await? == Packet::PingResp {
                return Ok(());
            }
        }
    }

    /// DISCONNECT and close.
    ///
    /// # Errors
    /// A closed connection.
    pub async fn disconnect(mut self) -> Result<(), ClientError> {
        self.send(&Packet::disconnect()).await?;
        match &mut self.conn {
            Link::Ws(conn) => {
                let _ = conn.close().await;
            }
            Link::Tcp(stream, _) => {
                let _ = stream.shutdown().await;
            }
        }
        Ok(())
    }
}
