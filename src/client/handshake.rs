//! The client side of the WebSocket opening handshake (RFC 6455 §4.1) over
//! a plain TCP stream with TCP_NODELAY set, and the framed connection it
//! yields. Hand-written because awc offers no way to set TCP_NODELAY, and
//! Nagle's algorithm with delayed ACKs stalls small writes by up to 40 ms.

use actix_codec::{Framed, FramedParts};
use actix_http::ws::{Codec, hash_key};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::ClientError;

/// Longest handshake response accepted.
const MAX_RESPONSE: usize = 16 * 1024;

/// A connected WebSocket, framed with actix-http's codec in client mode.
pub(crate) type Connection = Framed<TcpStream, Codec>;

/// `ws://host:port/path` split into the address to dial, the Host header
/// and the request path.
fn parse(url: &str) -> Result<(String, String), ClientError> {
    let rest = if let Some(rest) = url.strip_prefix("ws://") {
        rest
    } else if url.starts_with("wss://") {
        return Err(ClientError::Connect(
            "wss:// is not supported by this client; put TLS in front with a proxy".into(),
        ));
    } else {
        return Err(ClientError::Connect(format!("not a ws:// URL: {url}")));
    };
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    if host.is_empty() {
        return Err(ClientError::Connect(format!("no host in {url}")));
    }
    Ok((host.to_owned(), path.to_owned()))
}

/// Connects, performs the handshake offering `protocol`, and returns the
/// framed connection.
pub(crate) async fn connect(
    url: &str,
    protocol: &str,
    max_frame: usize,
) -> Result<Connection, ClientError> {
    let (host, path) = parse(url)?;
    let addr = if host.contains(':') {
        host.clone()
    } else {
        format!("{host}:80")
    };
    let mut stream = TcpStream::connect(&addr)
        .await
        .map_err(|e| ClientError::Connect(format!("{addr}: {e}")))?;
    stream
        .set_nodelay(true)
        .map_err(|e| ClientError::Connect(e.to_string()))?;
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
    let codec = Codec::new().client_mode().max_size(max_frame);
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
            ("127.0.0.1:7878".into(), "/ws".into())
        );
        assert_eq!(parse("ws://h:1").unwrap(), ("h:1".into(), "/".into()));
        assert!(parse("wss://h/ws").is_err());
        assert!(parse("http://h/ws").is_err());
        assert!(parse("ws:///ws").is_err());
    }
}
