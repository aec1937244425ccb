//! WebSocket frames read by Wharf's own read loops and clients:
//! actix-http's codec, with the frame they read millions of times read in
//! front of it.
//!
//! A whole (FIN) text or binary frame with a length of up to 65,535 bytes,
//! masked when it comes from a client and unmasked when it comes from the
//! server, is split off the read buffer here (and unmasked); every other
//! frame (control frames, fragments, frames masked the wrong way, 64-bit
//! lengths, reserved bits, frames over the limit) goes to actix-http's
//! codec, which keeps the fragmentation state and the errors. Read through
//! the codec alone, a subscriber's frame cost ~350 instructions of the
//! ~1,600 of its whole delivery (callgrind of `wharf-bench`'s 1 -> 50), and
//! the codec was ~10% of a 1 -> 1 broker's samples.

use actix_codec::{Decoder, Encoder};
use actix_http::ws::{Codec, Frame, Item, Message, ProtocolError};
use bytes::{Buf, BytesMut};

/// actix-http's codec with the common data frame read first.
pub(crate) struct FrameCodec {
    inner: Codec,
    max_size: usize,
    /// Frames come from clients, masked (the server's side).
    server: bool,
    /// A fragmented message is under way: every frame goes to `inner`,
    /// which knows what may follow.
    fragmented: bool,
}

impl FrameCodec {
    /// The server's side: reads masked frames of at most `max_size`.
    pub(crate) fn server(max_size: usize) -> FrameCodec {
        FrameCodec {
            inner: Codec::new().max_size(max_size),
            max_size,
            server: true,
            fragmented: false,
        }
    }

    /// A client's side: reads unmasked frames of at most `max_size`, and
    /// masks what it writes.
    #[cfg_attr(not(feature = "client"), allow(dead_code))]
    pub(crate) fn client(max_size: usize) -> FrameCodec {
        FrameCodec {
            inner: Codec::new().client_mode().max_size(max_size),
            max_size,
            server: false,
            fragmented: false,
        }
    }

    /// The common frame, when `src` starts with one: `None` leaves the
    /// frame (whole or not) to the inner codec.
    fn data_frame(&self, src: &mut BytesMut) -> Option<Result<Option<Frame>, ProtocolError>> {
        let (&[b0, b1], rest) = src.split_first_chunk::<2>()?;
        // FIN, no reserved bits, text (1) or binary (2).
        let text = match b0 {
            FIN_TEXT => true,
            FIN_BINARY => false,
            _ => return None,
        };
        if (b1 & 0x80 != 0) != self.server {
            return None;
        }
        let (length_bytes, len) = match b1 & 0x7f {
            n @ 0..=125 => (0, usize::from(n)),
            126 => (
                2,
                usize::from(u16::from_be_bytes(*rest.first_chunk::<2>()?)),
            ),
            _ => return None,
        };
        if len > self.max_size {
            return None;
        }
        let header = 2 + length_bytes + if self.server { 4 } else { 0 };
        if src.len() < header + len {
            // Not all here yet: the reader reads on.
            src.reserve(header + len - src.len());
            return Some(Ok(None));
        }
        let key = self.server.then(|| {
            let at = 2 + length_bytes;
            [src[at], src[at + 1], src[at + 2], src[at + 3]]
        });
        src.advance(header);
        let mut payload = src.split_to(len);
        if let Some(key) = key {
            unmask(&mut payload, key);
        }
        let payload = payload.freeze();
        Some(Ok(Some(if text {
            Frame::Text(payload)
        } else {
            Frame::Binary(payload)
        })))
    }
}

/// The first byte of a whole text frame: FIN and the opcode.
const FIN_TEXT: u8 = 0x80 | super::TEXT;
/// The first byte of a whole binary frame.
const FIN_BINARY: u8 = 0x80 | super::BINARY;

/// Undoes a client's masking (RFC 6455 §5.3): eight bytes at a time.
fn unmask(buf: &mut [u8], key: [u8; 4]) {
    let [a, b, c, d] = key;
    let key8 = u64::from_ne_bytes([a, b, c, d, a, b, c, d]);
    let mut chunks = buf.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        chunk.copy_from_slice(&(u64::from_ne_bytes(word) ^ key8).to_ne_bytes());
    }
    // The rest starts at a multiple of 8, so of 4: the key starts over.
    for (i, byte) in chunks.into_remainder().iter_mut().enumerate() {
        *byte ^= key[i % 4];
    }
}

impl Decoder for FrameCodec {
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

impl Encoder<Message> for FrameCodec {
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

    /// Frames as a server writes them (unmasked), or a client (masked).
    fn frames_from(client: bool, messages: Vec<Message>) -> BytesMut {
        let mut writer = if client {
            Codec::new().client_mode()
        } else {
            Codec::new()
        };
        let mut out = BytesMut::new();
        for m in messages {
            writer.encode(m, &mut out).unwrap();
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

    /// Both sides: ours, actix's codec of the same side, and what the
    /// other side writes.
    fn sides(max: usize) -> [(FrameCodec, Codec, bool); 2] {
        [
            (
                FrameCodec::client(max),
                Codec::new().client_mode().max_size(max),
                false,
            ),
            (FrameCodec::server(max), Codec::new().max_size(max), true),
        ]
    }

    #[test]
    fn reads_what_actix_reads() {
        let big = Bytes::from(vec![7u8; 70_000]);
        let mid = Bytes::from(vec![3u8; 300]);
        let odd = Bytes::from((0..=250).collect::<Vec<u8>>());
        for (mut ours, mut theirs, from_client) in sides(1 << 20) {
            let frames = frames_from(
                from_client,
                vec![
                    Message::Binary(Bytes::from_static(b"one")),
                    Message::Text("two".into()),
                    Message::Binary(Bytes::new()),
                    Message::Binary(mid.clone()),
                    Message::Binary(odd.clone()),
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
                ],
            );
            for step in [1, 2, 3, 7, 64, 1 << 20] {
                let a = read_all(&mut ours, &frames, step);
                let b = read_all(&mut theirs, &frames, step);
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "step {step}");
                assert_eq!(a.len(), 12);
                assert!(matches!(&a[4], Ok(Frame::Binary(b)) if *b == odd));
            }
        }
    }

    #[test]
    fn refuses_what_actix_refuses() {
        for (mut ours, mut theirs, from_client) in sides(200) {
            // The mask bit the other side's frames do not carry.
            let wrong_mask = if from_client {
                vec![0x82, 0x01, 5]
            } else {
                vec![0x82, 0x81, 1, 2, 3, 4, 5]
            };
            let cases: Vec<Vec<u8>> = vec![
                // Too large for the limit (16-bit length 300 > 200).
                frames_from(
                    from_client,
                    vec![Message::Binary(Bytes::from(vec![0u8; 300]))],
                )
                .to_vec(),
                wrong_mask,
                // A reserved bit set.
                vec![0xc2, 0x01 | (u8::from(from_client) << 7), 5, 1, 2, 3, 4],
                // A data frame inside a fragmented message.
                frames_from(
                    from_client,
                    vec![
                        Message::Continuation(Item::FirstText(Bytes::from_static(b"a"))),
                        Message::Binary(Bytes::from_static(b"b")),
                    ],
                )
                .to_vec(),
                // A continuation with nothing to continue (actix's
                // encoder will not write one).
                if from_client {
                    vec![0x80, 0x81, 1, 2, 3, 4, 5]
                } else {
                    vec![0x80, 0x01, 5]
                },
            ];
            for bytes in cases {
                let a = read_all(&mut ours, &bytes, 1 << 20);
                let b = read_all(&mut theirs, &bytes, 1 << 20);
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "{bytes:?}");
                assert!(a.last().is_some_and(Result::is_err), "{bytes:?}: {a:?}");
                // Each case on a fresh pair: a refused stream is over.
                (ours, theirs) = if from_client {
                    (FrameCodec::server(200), Codec::new().max_size(200))
                } else {
                    (
                        FrameCodec::client(200),
                        Codec::new().client_mode().max_size(200),
                    )
                };
            }
        }
    }

    #[test]
    fn unmasking_is_xor_with_the_key_repeated() {
        for len in 0..40 {
            let plain: Vec<u8> = (0..len as u8).collect();
            let key = [0x12, 0x34, 0x56, 0x78];
            let mut buf: Vec<u8> = plain
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ key[i % 4])
                .collect();
            unmask(&mut buf, key);
            assert_eq!(buf, plain, "{len}");
        }
    }
}
