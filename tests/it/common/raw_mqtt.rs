//! A blocking MQTT client on a raw TCP stream, built on the crate's own
//! codec: it sends exactly the packets a test writes (MQTT 3.1.1 or 5)
//! and returns every packet the server sends, DISCONNECT included.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use wharf::protocol::mqtt::{self, ConnAck, Connect, Packet};

/// How long a read waits before the test fails.
pub const T: Duration = Duration::from_secs(10);

/// One raw MQTT connection.
pub struct Raw {
    pub stream: TcpStream,
    buf: BytesMut,
    /// The protocol level packets are encoded and decoded at.
    pub level: u8,
}

impl Raw {
    /// A connection that has sent nothing yet (level 3.1.1).
    pub fn open(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect_timeout(&addr, T).unwrap();
        stream.set_read_timeout(Some(T)).unwrap();
        Raw {
            stream,
            buf: BytesMut::new(),
            level: mqtt::LEVEL_3_1_1,
        }
    }

    /// Connects with `c` (at its level) and returns the CONNACK's code.
    pub fn connect(addr: SocketAddr, c: Connect) -> (Raw, u8) {
        let (raw, ack) = Raw::connack(addr, c);
        (raw, ack.code)
    }

    /// Connects with `c` and returns the whole CONNACK.
    pub fn connack(addr: SocketAddr, c: Connect) -> (Raw, ConnAck) {
        let mut raw = Raw::open(addr);
        raw.level = c.level;
        raw.send(&Packet::Connect(Box::new(c)));
        match raw.recv() {
            Some(Packet::ConnAck(a)) => (raw, a),
            other => panic!("expected CONNACK, got {other:?}"),
        }
    }

    pub fn send(&mut self, p: &Packet) {
        let mut out = BytesMut::new();
        mqtt::encode(p, &mut out, self.level);
        self.stream.write_all(&out).unwrap();
    }

    /// The next packet; `None` once the server closed the connection.
    pub fn recv(&mut self) -> Option<Packet> {
        loop {
            match mqtt::decode(&mut self.buf, 1 << 20, self.level) {
                Ok(Some(p)) => return Some(p),
                Ok(None) => {}
                // Not MQTT (a TLS alert on a TLS port): nothing for us.
                Err(_) => return None,
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk) {
                Ok(0) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// PUBLISHes received until there are `n` (each acknowledged when
    /// `ack`), as (payload, dup) pairs; other packets are passed over.
    pub fn take_publishes(&mut self, n: usize, ack: bool) -> Vec<(bytes::Bytes, bool)> {
        let mut got = Vec::new();
        while got.len() < n {
            match self.recv() {
                Some(Packet::Publish(p)) => {
                    if let (true, Some(pid)) = (ack, p.pid) {
                        self.send(&Packet::puback(pid));
                    }
                    got.push((p.payload, p.dup));
                }
                Some(_) => {}
                None => panic!("closed after {} of {n} publishes", got.len()),
            }
        }
        got
    }

    /// Every packet up to the PINGRESP answering a PINGREQ sent now: what
    /// the server had queued for this connection before it.
    pub fn until_pong(&mut self) -> Vec<Packet> {
        self.send(&Packet::PingReq);
        let mut got = Vec::new();
        loop {
            match self.recv() {
                Some(Packet::PingResp) => return got,
                Some(p) => got.push(p),
                None => panic!("closed before PINGRESP, after {got:?}"),
            }
        }
    }
}

/// A CONNECT at `level` for client `id`: clean, keep-alive 60 s, nothing
/// else.
pub fn hello_at(level: u8, id: &str) -> Connect {
    Connect {
        level,
        client_id: id.into(),
        clean_session: true,
        keep_alive: 60,
        will: None,
        username: None,
        password: None,
        props: Default::default(),
    }
}
