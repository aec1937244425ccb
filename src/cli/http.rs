//! The REST side of the command line: awc with the `--token` as a bearer
//! token, `--ca` trust for https, a timeout on every request, and the
//! broker's `{"error":{"code","message"}}` bodies turned into
//! [`CliError`]s.

use std::time::Duration;

use awc::http::{Method, StatusCode};
use bytes::Bytes;
use serde_json::Value;

use super::{CliError, Conn};

/// Largest response body read.
const MAX_BODY: usize = 64 << 20;

/// A REST client for one broker.
pub struct Http {
    client: awc::Client,
    base: String,
    token: Option<String>,
    timeout: Duration,
}

/// A request's body: its bytes and content type.
pub struct Body {
    /// The content type.
    pub content_type: &'static str,
    /// The bytes.
    pub bytes: Bytes,
    /// Extra headers.
    pub headers: Vec<(String, String)>,
}

impl Body {
    /// A JSON body.
    pub fn json(value: &Value) -> Body {
        Body {
            content_type: "application/json",
            bytes: Bytes::from(value.to_string()),
            headers: Vec::new(),
        }
    }
}

impl Http {
    /// A client for `conn`'s broker; every request gives up after
    /// `timeout`.
    pub fn new(conn: &Conn, timeout: Duration) -> Result<Http, CliError> {
        let base = conn.base()?;
        let mut connector = awc::Connector::new().timeout(timeout);
        if base.starts_with("https://") {
            connector = connector.rustls_0_23(conn.tls()?);
        }
        let client = awc::Client::builder()
            .connector(connector)
            .timeout(timeout)
            .disable_redirects()
            .finish();
        Ok(Http {
            client,
            base,
            token: conn.token.clone(),
            timeout,
        })
    }

    /// The base URL, for messages.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Sends a request and reads the whole answer: (status, body). Fails
    /// only when no answer came.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Body>,
    ) -> Result<(StatusCode, Bytes), CliError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.client.request(method, &url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let exchange = async {
            let sent = match body {
                Some(b) => {
                    req = req.content_type(b.content_type);
                    for (k, v) in &b.headers {
                        req = req.insert_header((k.as_str(), v.as_str()));
                    }
                    req.send_body(b.bytes).await
                }
                None => req.send().await,
            };
            let mut resp = sent.map_err(|e| self.send_error(e))?;
            let bytes = resp
                .body()
                .limit(MAX_BODY)
                .await
                .map_err(|e| CliError::failed(format!("reading the answer from {url}: {e}")))?;
            Ok((resp.status(), bytes))
        };
        match actix_rt::time::timeout(self.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(CliError::timeout(&self.base, self.timeout)),
        }
    }

    /// A request whose success answer is JSON (or empty: `null`); an
    /// error status becomes the broker's error.
    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<Body>,
    ) -> Result<Value, CliError> {
        let (status, bytes) = self.send(method, path, body).await?;
        if !status.is_success() {
            return Err(self.status_error(status, &bytes));
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| CliError::failed(format!("{}{path}: not JSON: {e}", self.base)))
    }

    /// `GET path` as JSON.
    pub async fn get(&self, path: &str) -> Result<Value, CliError> {
        self.json(Method::GET, path, None).await
    }

    fn send_error(&self, e: awc::error::SendRequestError) -> CliError {
        use awc::error::{ConnectError, SendRequestError};
        match e {
            SendRequestError::Connect(ConnectError::Timeout) | SendRequestError::Timeout => {
                CliError::timeout(&self.base, self.timeout)
            }
            SendRequestError::Connect(e) => {
                CliError::failed(format!("cannot connect to {}: {e}", self.base))
            }
            e => CliError::failed(format!("{}: {e}", self.base)),
        }
    }

    /// The broker's `{"error":{"code","message"}}`, or the status itself.
    fn status_error(&self, status: StatusCode, body: &[u8]) -> CliError {
        let parsed: Option<Value> = serde_json::from_slice(body).ok();
        let field = |name: &str| {
            parsed
                .as_ref()
                .and_then(|v| v["error"][name].as_str())
                .map(str::to_owned)
        };
        let code = field("code").unwrap_or_else(|| format!("http_{}", status.as_u16()));
        let message = field("message").unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body).trim().to_owned();
            if text.is_empty() {
                status.to_string()
            } else {
                text
            }
        });
        let mut err = CliError::refused(&code, &message);
        if status == StatusCode::UNAUTHORIZED && self.token.is_none() {
            err.text.push_str(" (give --token or set WHARF_TOKEN)");
        }
        err
    }
}

/// Percent-encodes `s` for a path (keeping `/`) or a query value.
pub fn encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        let plain = b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/');
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `?k=v&...` of the pairs whose value is present (empty if none).
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v, false))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding() {
        assert_eq!(encode("a/b c#", true), "a/b%20c%23");
        assert_eq!(encode("a/b", false), "a%2Fb");
        assert_eq!(query(&[("a", Some("1".into())), ("b", None)]), "?a=1");
        assert_eq!(query(&[("b", None)]), "");
    }
}
