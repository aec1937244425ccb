//! JetStream spoken through its JSON API over plain NATS requests (the
//! client's typed API does not parse every server version's replies,
//! 2.9's among them): streams made, messages published with an expected
//! last sequence, read back through ephemeral push consumers, purged.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::NatsError;

/// JetStream's `err_code` for a publish whose expected last sequence is
/// not the stream's.
const WRONG_LAST_SEQUENCE: &str = "10071";

/// A JetStream API request; its JSON reply, or the error it carries.
///
/// # Errors
/// The request failing, an unreadable reply, or JetStream's refusal.
pub(super) async fn api(
    client: &async_nats::Client,
    subject: String,
    body: Value,
) -> Result<Value, NatsError> {
    let reply = client
        .request(subject, body.to_string().into())
        .await
        .map_err(|e| NatsError::Request(e.to_string()))?;
    let v: Value =
        serde_json::from_slice(&reply.payload).map_err(|e| NatsError::Unreadable(e.to_string()))?;
    match v.get("error") {
        Some(e) => Err(NatsError::Refused {
            description: e["description"].as_str().unwrap_or("error").to_owned(),
            code: e["err_code"].to_string(),
        }),
        None => Ok(v),
    }
}

/// Finds the stream `config` names, or creates it as `config` says, and
/// waits (up to `wait`) until it has a leader: a replicated stream just
/// made takes a moment to elect one, and refuses nothing meanwhile but
/// answers nothing either.
///
/// # Errors
/// No JetStream on the server, a refusal, or no leader in time.
pub(super) async fn ensure_stream(
    client: &async_nats::Client,
    config: Value,
    wait: Duration,
) -> Result<(), NatsError> {
    let name = config["name"].as_str().unwrap_or_default().to_owned();
    let info = format!("$JS.API.STREAM.INFO.{name}");
    if api(client, info.clone(), json!({})).await.is_err() {
        api(client, format!("$JS.API.STREAM.CREATE.{name}"), config).await?;
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // A single server says nothing of a cluster.
        if let Ok(v) = api(client, info.clone(), json!({})).await
            && (v.get("cluster").is_none()
                || v["cluster"]["leader"]
                    .as_str()
                    .is_some_and(|l| !l.is_empty()))
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(NatsError::Stopped("electing the stream's leader"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A stream's configuration: file storage, limits retention, no limit on
/// messages or bytes, `replicas` copies; callers change what they need.
pub(super) fn file_stream(name: &str, subjects: &str, replicas: usize) -> Value {
    json!({
        "name": name,
        "subjects": [subjects],
        "retention": "limits",
        "max_consumers": -1,
        "max_msgs": -1,
        "max_bytes": -1,
        "max_age": 0,
        "max_msg_size": -1,
        "storage": "file",
        "discard": "new",
        "num_replicas": replicas,
        "duplicate_window": 120_000_000_000u64,
    })
}

/// Why a publish to a stream was not stored.
#[derive(Debug)]
pub(super) enum PublishError {
    /// The subject's last message is not the one expected: another
    /// writer came in between.
    Fenced,
    /// Anything else (NATS away, a timeout, a refusal): it may or may
    /// not have been stored.
    Other(NatsError),
}

/// Publishes `payload` to a stream's `subject` with `headers`, stored only
/// if the subject's last message in the stream has sequence `expected`
/// (0: the subject has none); the stored message's sequence.
///
/// # Errors
/// [`PublishError::Fenced`], or another failure within `limit`.
pub(super) async fn publish_expecting(
    client: &async_nats::Client,
    subject: String,
    mut headers: async_nats::HeaderMap,
    payload: Bytes,
    expected: u64,
    limit: Duration,
) -> Result<u64, PublishError> {
    headers.insert(
        "Nats-Expected-Last-Subject-Sequence",
        expected.to_string().as_str(),
    );
    let reply = tokio::time::timeout(
        limit,
        client.request_with_headers(subject, headers, payload),
    )
    .await
    .map_err(|_| PublishError::Other(NatsError::Timeout))?
    .map_err(|e| PublishError::Other(NatsError::Request(e.to_string())))?;
    let v: Value = serde_json::from_slice(&reply.payload)
        .map_err(|e| PublishError::Other(NatsError::Unreadable(e.to_string())))?;
    if let Some(e) = v.get("error") {
        let code = e["err_code"].to_string();
        if code == WRONG_LAST_SEQUENCE {
            return Err(PublishError::Fenced);
        }
        return Err(PublishError::Other(NatsError::Refused {
            description: e["description"].as_str().unwrap_or("error").to_owned(),
            code,
        }));
    }
    v["seq"]
        .as_u64()
        .ok_or_else(|| PublishError::Other(NatsError::Unreadable("a reply without seq".into())))
}

/// A message read back from a stream.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    /// Its subject.
    pub subject: String,
    /// Its headers.
    pub headers: Option<async_nats::HeaderMap>,
    /// Its payload.
    pub payload: Bytes,
    /// Its sequence in the stream.
    pub seq: u64,
}

/// The messages of `stream` on subjects matching `filter`, in order, at
/// most `max`: one direct message get after another (no consumer, so
/// nothing to place on a server that may be down), each within `wait`.
///
/// # Errors
/// A refusal, more than `max` messages, or a reply that does not come.
pub(super) async fn read(
    client: &async_nats::Client,
    stream: &str,
    filter: &str,
    wait: Duration,
    max: u64,
) -> Result<Vec<Stored>, NatsError> {
    let mut out = Vec::new();
    let mut next = 1u64;
    loop {
        let got = tokio::time::timeout(
            wait,
            get(
                client,
                stream,
                json!({ "seq": next, "next_by_subj": filter }),
            ),
        )
        .await
        .map_err(|_| NatsError::Timeout)??;
        let Some(m) = got else {
            return Ok(out);
        };
        if m.seq < next {
            return Err(NatsError::Unreadable(format!(
                "a message get for {next} answered {}",
                m.seq
            )));
        }
        if out.len() as u64 >= max {
            return Err(NatsError::Refused {
                description: format!("more than {max} messages on {filter}"),
                code: "wharf".into(),
            });
        }
        next = m.seq + 1;
        out.push(m);
    }
}

/// One message get (`$JS.API.STREAM.MSG.GET`): the message, or `None`
/// when there is none.
async fn get(
    client: &async_nats::Client,
    stream: &str,
    request: Value,
) -> Result<Option<Stored>, NatsError> {
    let v = match api(client, format!("$JS.API.STREAM.MSG.GET.{stream}"), request).await {
        Ok(v) => v,
        // 10037: no message found.
        Err(NatsError::Refused { code, .. }) if code == "10037" => return Ok(None),
        Err(e) => return Err(e),
    };
    use base64::Engine as _;
    let m = &v["message"];
    let decode = |field: &str| {
        m[field]
            .as_str()
            .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
    };
    let headers = decode("hdrs").and_then(|raw| parse_headers(&raw));
    Ok(Some(Stored {
        subject: m["subject"].as_str().unwrap_or_default().to_owned(),
        headers,
        payload: decode("data").unwrap_or_default().into(),
        seq: m["seq"].as_u64().unwrap_or(0),
    }))
}

/// The last message of `stream` on `subject`, if it has one.
///
/// # Errors
/// A refusal other than "no message", or no reply.
pub(super) async fn last_of(
    client: &async_nats::Client,
    stream: &str,
    subject: &str,
) -> Result<Option<Stored>, NatsError> {
    get(client, stream, json!({ "last_by_subj": subject })).await
}

/// Headers as a stored message's `hdrs` hold them (`NATS/1.0` then
/// `Name: value` lines).
fn parse_headers(raw: &[u8]) -> Option<async_nats::HeaderMap> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut map = async_nats::HeaderMap::new();
    for line in text.split("\r\n").skip(1) {
        if let Some((k, v)) = line.split_once(':') {
            map.insert(k.trim(), v.trim());
        }
    }
    Some(map)
}

/// Removes `stream`'s messages on `subject` below sequence `below`.
///
/// # Errors
/// A refusal or no reply.
pub(super) async fn purge_below(
    client: &async_nats::Client,
    stream: &str,
    subject: &str,
    below: u64,
) -> Result<(), NatsError> {
    api(
        client,
        format!("$JS.API.STREAM.PURGE.{stream}"),
        json!({ "filter": subject, "seq": below }),
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_headers_are_read() {
        let h = parse_headers(b"NATS/1.0\r\nWharf-Writer: a/1\r\n\r\n").unwrap();
        assert_eq!(h.get("Wharf-Writer").map(|v| v.as_str()), Some("a/1"));
    }
}
