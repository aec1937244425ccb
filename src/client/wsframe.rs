//! The clients' WebSocket codec: actix-http's, in client mode, with the
//! frame a subscriber reads millions of times read in front of it.
//!
//! A whole (FIN) text or binary frame from the server, unmasked, with a
//! length of up to 65,535 bytes, is split off the read buffer here; every
//! other frame (control frames, fragments, masked or oversized frames,
//! 64-bit lengths, reserved bits) goes to actix-http's codec, which keeps
//! the fragmentation state and the errors. Read through the codec alone,
//! a subscriber's frame cost ~350 instructions of the ~1,600 of its whole
//! delivery (callgrind of `wharf-bench`'s 1 -> 50).

use actix_codec::{Decoder, Encoder};
use actix_http::ws::{Codec, Frame, Item, Message, ProtocolError};
use bytes::{Buf, BytesMut};

/// actix-http's client-mode codec with the common data frame read first.
pub(crate) struct ClientCodec {
    inner: Codec,
    max_size: usize,
    /// A fragmented message is under way: every frame goes to `inner`,
    /// which knows what may follow.
    fragmented: bool,
}

impl ClientCodec {
    /// A client-mode codec refusing frames over `max_size` bytes.
    pub(crate) fn new(max_size: usize) -> ClientCodec {
        ClientCodec {
            inner: Codec::new().client_mode().max_size(max_size),
            max_size,
            fragmented: false,
        }
    }

    /// The common frame, when `src` starts with one: `None` leaves the
    /// frame (whole or not) to the inner codec.
    fn data_frame(&self, src: &mut BytesMut) -> Option<Result<Option<Frame>, ProtocolError>> {
        let (&[b0, b1], rest) = src.split_first_chunk::<2>()?;
        // FIN, no reserved bits, text (1) or binary (2); not masked.
        let text = match b0 {
            0x81 => true,
            0x82 => false,
            _ => return None,
        };
        let (header, len) = match b1 {
            0..=125 => (2, usize::from(b1)),
            126 => (
                4,
                usize::from(u16::from_be_bytes(*rest.first_chunk::<2>()?)),
            ),
            _ => return None,
        };
        if len > self.max_size {
            return None;
        }
        if src.len() < header + len {
            // Not all here yet: the framed reader reads on.
            src.reserve(header + len - src.len());
            return Some(Ok(None));
        }
        src.advance(header);
        let payload = src.split_to(len).freeze();
        Some(Ok(Some(if text {
            Frame::Text(payload)
        } else {
            Frame::Binary(payload)
        })))
    }
}

impl Decoder for ClientCodec {
    type Item = Frame;
    type Error = ProtocolError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, ProtocolError> {
        if !self.fragmented
            && let Some(read) = self.data_frame(src)
        {
            return read;
        }
        let frame = self.inner.decode(src)?;
        match &frame {
            Some(Frame::Continuation(Item::FirstText(_) | Item::FirstBinary(_))) => {
                self.fragmented = true;
            }
            Some(Frame::Continuation(Item::Last(_))) => self.fragmented = false,
            _ => {}
        }
        Ok(frame)
    }
}

impl Encoder<Message> for ClientCodec {
    type Error = ProtocolError;

    fn encode(&mut self, item: Message, dst: &mut BytesMut) -> Result<(), ProtocolError> {
        self.inner.encode(item, dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_http::ws::{CloseCode, CloseReason};
    use bytes::Bytes;

    /// Server frames (unmasked) as a server writes them.
    fn server_frames(messages: Vec<Message>) -> BytesMut {
        let mut server = Codec::new();
        let mut out = BytesMut::new();
        for m in messages {
            server.encode(m, &mut out).unwrap();
        }
        out
    }

    /// Everything `codec` reads from `bytes`, fed `step` bytes at a time.
    fn read_all(
        codec: &mut impl Decoder<Item = Frame, Error = ProtocolError>,
        bytes: &[u8],
        step: usize,
    ) -> Vec<Result<Frame, String>> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for chunk in bytes.chunks(step) {
            buf.extend_from_slice(chunk);
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(f)) => out.push(Ok(f)),
                    Ok(None) => break,
                    Err(e) => {
                        out.push(Err(e.to_string()));
                        return out;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn reads_what_actix_reads() {
        let big = Bytes::from(vec![7u8; 70_000]);
        let mid = Bytes::from(vec![3u8; 300]);
        let frames = server_frames(vec![
            Message::Binary(Bytes::from_static(b"one")),
            Message::Text("two".into()),
            Message::Binary(Bytes::new()),
            Message::Binary(mid.clone()),
            Message::Binary(big.clone()),
            Message::Ping(Bytes::from_static(b"p")),
            Message::Continuation(Item::FirstBinary(Bytes::from_static(b"fi"))),
            Message::Continuation(Item::Continue(Bytes::from_static(b"rs"))),
            Message::Continuation(Item::Last(Bytes::from_static(b"t"))),
            Message::Binary(Bytes::from_static(b"after")),
            Message::Close(Some(CloseReason {
                code: CloseCode::Normal,
                description: Some("bye".into()),
            })),
        ]);
        for step in [1, 2, 3, 7, 64, 1 << 20] {
            let ours = read_all(&mut ClientCodec::new(1 << 20), &frames, step);
            let theirs = read_all(
                &mut Codec::new().client_mode().max_size(1 << 20),
                &frames,
                step,
            );
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "step {step}");
            assert_eq!(ours.len(), 11);
        }
    }

    #[test]
    fn refuses_what_actix_refuses() {
        let cases: Vec<Vec<u8>> = vec![
            // Too large for the limit (16-bit length 300 > 200).
            server_frames(vec![Message::Binary(Bytes::from(vec![0u8; 300]))]).to_vec(),
            // Masked by the server.
            vec![0x82, 0x81, 1, 2, 3, 4, 5],
            // A reserved bit set.
            vec![0xc2, 0x01, 5],
            // A data frame inside a fragmented message.
            server_frames(vec![
                Message::Continuation(Item::FirstText(Bytes::from_static(b"a"))),
                Message::Binary(Bytes::from_static(b"b")),
            ])
            .to_vec(),
            // A continuation with nothing to continue.
            vec![0x80, 0x01, 5],
        ];
        for bytes in cases {
            let ours = read_all(&mut ClientCodec::new(200), &bytes, 1 << 20);
            let theirs = read_all(
                &mut Codec::new().client_mode().max_size(200),
                &bytes,
                1 << 20,
            );
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{bytes:?}");
            assert!(
                ours.last().is_some_and(Result::is_err),
                "{bytes:?}: {ours:?}"
            );
        }
    }
}
