//! The client side of the WebSocket opening handshake (RFC 6455 §4.1) over
//! a TCP stream with TCP_NODELAY set (`ws://`), or TLS over it (`wss://`,
//! rustls), and the framed connection it yields. Hand-written because awc offers no way to set TCP_NODELAY, and
//! Nagle's algorithm with delayed ACKs stalls small writes by up to 40 ms.
//!
//! # Design notes
//!
//! The handshake yields a `Framed` socket with `wsframe::FrameCodec` in
//! client mode: the common unmasked data frame is read by hand, everything
//! else by actix-http's codec. The connection's task (`conn.rs`), spawned
//! on the actix thread, owns it: it writes every command already queued,
//! then flushes once; it reads up to `DISPATCH_BURST` (64) frames per wake,
//! decodes bincode `message` frames borrowed (`codec::decode_message`, the
//! mirror of the server's prefix and body) and copies one only for a live
//! subscription; it gathers each subscription's frames into a batch and
//! hands the batch to the subscription's stream (`stream.rs`) when the
//! burst ends, the subscription changes or another kind of frame comes.
//! Answers go to the waiting request by `rid`. A stream is bounded in
//! items: the receiver publishes how many it has taken, the sender sends
//! what fits and waits for the rest, so a full stream stops the task
//! reading the socket and the server's slow-consumer policy, not the
//! client's memory, takes the strain. `unsubscribe` and `cancel` drop
//! their stream before they wait for the receipt.

use actix_codec::{Framed, FramedParts};
use actix_http::ws::hash_key;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ClientError;
use crate::wsframe::FrameCodec;

/// Longest handshake response accepted.
const MAX_RESPONSE: usize = 16 * 1024;

/// A connected WebSocket, framed with actix-http's codec in client mode
/// (the common data frame read in front of it: [`FrameCodec`]).
pub(crate) type Connection = Framed<Stream, FrameCodec>;

/// The byte stream under a connection: plain TCP or TLS over it.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl tokio::io::AsyncRead for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// `ws://host:port/path` (or `wss://`) split into whether it is TLS, the
/// address to dial, the Host header and the request path.
fn parse(url: &str) -> Result<(bool, String, String), ClientError> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("ws://") {
        (false, rest)
    } else if let Some(rest) = url.strip_prefix("wss://") {
        (true, rest)
    } else {
        return Err(ClientError::Connect(format!(
            "not a ws:// or wss:// URL: {url}"
        )));
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(ClientError::Connect(format!("no host in {url}")));
    }
    Ok((tls, host.to_owned(), path.to_owned()))
}

/// Connects, performs the handshake offering `protocol`, and returns the
/// framed connection.
/// `wss://` URLs need `tls` (the CA to trust: [`crate::tls::client_config`]).
pub(crate) async fn connect(
    url: &str,
    protocol: &str,
    max_frame: usize,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
) -> Result<Connection, ClientError> {
    let (secure, host, path) = parse(url)?;
    let addr = if host.contains(':') {
        host.clone()
    } else if secure {
        format!("{host}:443")
    } else {
        format!("{host}:80")
    };
    let tcp = TcpStream::connect(&addr)
        .await
        .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
    tcp.set_nodelay(true)
        .map_err(|e| ClientError::Connect(e.to_string()))?;
    let mut stream = if secure {
        let Some(config) = tls else {
            return Err(ClientError::Connect(
                "wss:// needs the CA to trust: set the options' tls (wharf::tls::client_config)"
                    .into(),
            ));
        };
        let name = match host.strip_prefix('[') {
            // An IPv6 literal, `[::1]:8443`.
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.split(':').next().unwrap_or_default(),
        };
        let server = rustls_pki_types::ServerName::try_from(name.to_owned())
            .map_err(|e| ClientError::Connect(format!("{name}: {e}")))?;
        let tls = tokio_rustls::TlsConnector::from(config.clone())
            .connect(server, tcp)
            .await
            .map_err(|e| ClientError::Connect(format!("TLS with {addr}: {e}")))?;
        Stream::Tls(Box::new(tls))
    } else {
        Stream::Plain(tcp)
    };
    let key = BASE64.encode(uuid::Uuid::now_v7().as_bytes());
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Protocol: {protocol}\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| ClientError::Connect(e.to_string()))?;
    let mut buf = BytesMut::with_capacity(1024);
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_RESPONSE {
            return Err(ClientError::Connect("handshake response too long".into()));
        }
        let n = stream
            .read_buf(&mut buf)
            .await
            .map_err(|e| ClientError::Connect(e.to_string()))?;
        if n == 0 {
            return Err(ClientError::Connect(
                "connection closed during handshake".into(),
            ));
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("101") {
        return Err(ClientError::Connect(format!(
            "server refused the upgrade: {status}"
        )));
    }
    let accept = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("sec-websocket-accept"))
        .map(|(_, v)| v.trim().to_owned());
    let expected = hash_key(key.as_bytes());
    if accept.as_deref().map(str::as_bytes) != Some(&expected[..]) {
        return Err(ClientError::Connect("bad Sec-WebSocket-Accept".into()));
    }
    let leftover = buf.split_off(end);
    let codec = FrameCodec::client(max_frame);
    Ok(Framed::from_parts(FramedParts::with_read_buf(
        stream, codec, leftover,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse("ws://127.0.0.1:7878/ws").unwrap(),
            (false, "127.0.0.1:7878".into(), "/ws".into())
        );
        assert_eq!(
            parse("ws://h:1").unwrap(),
            (false, "h:1".into(), "/".into())
        );
        assert_eq!(
            parse("wss://h/ws").unwrap(),
            (true, "h".into(), "/ws".into())
        );
        assert!(parse("http://h/ws").is_err());
        assert!(parse("ws:///ws").is_err());
    }
}
