//! JetStream spoken through its JSON API over plain NATS requests (the
//! client's typed API does not parse every server version's replies,
//! 2.9's among them): streams made, messages published with an expected
//! last sequence, read back through ephemeral push consumers, purged.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
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

/// Finds the stream `config` names, or creates it as `config` says.
///
/// # Errors
/// No JetStream on the server, or a refusal.
pub(super) async fn ensure_stream(
    client: &async_nats::Client,
    config: Value,
) -> Result<(), NatsError> {
    let name = config["name"].as_str().unwrap_or_default().to_owned();
    if api(client, format!("$JS.API.STREAM.INFO.{name}"), json!({}))
        .await
        .is_ok()
    {
        return Ok(());
    }
    api(client, format!("$JS.API.STREAM.CREATE.{name}"), config)
        .await
        .map(|_| ())
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

/// The stream sequence in a push delivery's reply subject
/// (`$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.…`, or with a domain
/// and account hash, two tokens later).
fn stream_seq(reply: Option<&async_nats::Subject>) -> Option<u64> {
    let tokens: Vec<&str> = reply?.as_str().split('.').collect();
    let at = if tokens.len() >= 12 { 7 } else { 5 };
    tokens.get(at)?.parse().ok()
}

/// The messages of `stream` on subjects matching `filter`, as `policy`
/// (`all`, `last_per_subject`) picks them, in order: an ephemeral push
/// consumer delivering to an inbox, read up to the count it reports
/// pending (at most `max`), each message within `wait`.
///
/// # Errors
/// A refusal, more than `max` messages, or a message that does not come.
pub(super) async fn read(
    client: &async_nats::Client,
    stream: &str,
    filter: &str,
    policy: &str,
    wait: Duration,
    max: u64,
) -> Result<Vec<Stored>, NatsError> {
    let inbox = client.new_inbox();
    let mut sub = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| NatsError::Request(e.to_string()))?;
    let created = api(
        client,
        format!("$JS.API.CONSUMER.CREATE.{stream}"),
        json!({
            "stream_name": stream,
            "config": {
                "deliver_subject": inbox,
                "deliver_policy": policy,
                "ack_policy": "none",
                "filter_subject": filter,
                "replay_policy": "instant",
                "inactive_threshold": 10_000_000_000u64,
                "mem_storage": true,
                "num_replicas": 1,
            }
        }),
    )
    .await?;
    let pending = created["num_pending"].as_u64().unwrap_or(0);
    let result = async {
        if pending > max {
            return Err(NatsError::Refused {
                description: format!("{pending} messages on {filter}, more than {max}"),
                code: "wharf".into(),
            });
        }
        let mut out = Vec::with_capacity(usize::try_from(pending).unwrap_or(0));
        for _ in 0..pending {
            let Ok(Some(m)) = tokio::time::timeout(wait, sub.next()).await else {
                return Err(NatsError::Stopped("a stream read"));
            };
            let Some(seq) = stream_seq(m.reply.as_ref()) else {
                continue;
            };
            out.push(Stored {
                subject: m.subject.to_string(),
                headers: m.headers,
                payload: m.payload,
                seq,
            });
        }
        Ok(out)
    }
    .await;
    if let Some(consumer) = created["name"].as_str() {
        // Done with it; the server would drop it idle anyway.
        let _ = client
            .publish(
                format!("$JS.API.CONSUMER.DELETE.{stream}.{consumer}"),
                Bytes::new(),
            )
            .await;
    }
    result
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
    let got = api(
        client,
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
        json!({ "last_by_subj": subject }),
    )
    .await;
    let v = match got {
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
        subject: m["subject"].as_str().unwrap_or(subject).to_owned(),
        headers,
        payload: decode("data").unwrap_or_default().into(),
        seq: m["seq"].as_u64().unwrap_or(0),
    }))
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
    fn the_stream_sequence_is_read_from_either_reply_form() {
        let old = async_nats::Subject::from("$JS.ACK.S.C.1.42.7.1700000000.0");
        assert_eq!(stream_seq(Some(&old)), Some(42));
        let new = async_nats::Subject::from("$JS.ACK.dom.acc.S.C.1.43.7.1700000000.0.tok");
        assert_eq!(stream_seq(Some(&new)), Some(43));
        assert_eq!(stream_seq(None), None);
    }

    #[test]
    fn stored_headers_are_read() {
        let h = parse_headers(b"NATS/1.0\r\nWharf-Writer: a/1\r\n\r\n").unwrap();
        assert_eq!(h.get("Wharf-Writer").map(|v| v.as_str()), Some("a/1"));
    }
}
