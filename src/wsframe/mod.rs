//! WebSocket framing (RFC 6455), for the server's read loops and writer
//! and for the Rust client alike; it imports nothing of either.
//!
//! - Writing, here: frames from the server side, unmasked, one header
//!   followed by the payload parts, straight into the write buffer.
//! - Reading, [`FrameCodec`] (`read.rs`): actix-http's codec with the
//!   common data frame read in front of it, for either side.

mod read;

pub(crate) use read::FrameCodec;

use bytes::{BufMut, BytesMut};

/// Text frame opcode.
pub const TEXT: u8 = 0x1;
/// Binary frame opcode.
pub const BINARY: u8 = 0x2;
/// Close frame opcode.
pub const CLOSE: u8 = 0x8;
/// Ping frame opcode.
pub const PING: u8 = 0x9;
/// Pong frame opcode.
pub const PONG: u8 = 0xA;

/// Bytes a frame header takes for a payload of `len` bytes.
pub fn header_len(len: usize) -> usize {
    if len < 126 {
        2
    } else if len <= 0xffff {
        4
    } else {
        10
    }
}

/// Appends one final frame with `opcode` whose payload is `parts`
/// concatenated.
pub fn write(out: &mut BytesMut, opcode: u8, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(header_len(len) + len);
    out.put_u8(0x80 | opcode);
    if len < 126 {
        out.put_u8(len as u8);
    } else if len <= 0xffff {
        out.put_u8(126);
        out.put_u16(len as u16);
    } else {
        out.put_u8(127);
        out.put_u64(len as u64);
    }
    for p in parts {
        out.put_slice(p);
    }
}

/// Appends a close frame with a status code and a reason (cut to the 123
/// bytes a control frame allows, on a character boundary).
pub fn write_close(out: &mut BytesMut, code: u16, reason: &str) {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    write(
        out,
        CLOSE,
        &[&code.to_be_bytes(), &reason.as_bytes()[..end]],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_codec::Decoder;
    use actix_http::ws::{Codec, Frame};

    fn decode(bytes: &mut BytesMut) -> Frame {
        Codec::new()
            .client_mode()
            .max_size(1 << 20)
            .decode(bytes)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn frames_decode_with_actix_codec_at_every_length_class() {
        for len in [0usize, 5, 125, 126, 300, 65_535, 65_536, 70_000] {
            let payload = vec![7u8; len];
            let mut buf = BytesMut::new();
            write(
                &mut buf,
                BINARY,
                &[&payload[..len / 2], &payload[len / 2..]],
            );
            assert_eq!(buf.len(), header_len(len) + len);
            match decode(&mut buf) {
                Frame::Binary(b) => assert_eq!(b.len(), len),
                other => panic!("{other:?}"),
            }
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn close_reason_is_cut_on_a_char_boundary() {
        let mut buf = BytesMut::new();
        write_close(&mut buf, 1008, &"é".repeat(100));
        match decode(&mut buf) {
            Frame::Close(Some(reason)) => {
                assert_eq!(u16::from(reason.code), 1008);
                assert!(reason.description.unwrap().len() <= 123);
            }
            other => panic!("{other:?}"),
        }
    }
}

/// What [`write`] writes, actix reads back frame for frame, however the
/// bytes are split on arrival (moved here from tests/it/fuzz.rs, so the writer
/// need not be public).
#[cfg(test)]
mod fuzz {
    use super::*;
    use actix_codec::Decoder;
    use actix_http::ws::{Codec, Frame};
    use bytes::{Bytes, BytesMut};
    use proptest::prelude::*;

    /// A frame for [`write`] to write, and what actix must read back.
    #[derive(Debug, Clone)]
    enum Out {
        Data(u8, Vec<u8>),
        Close(u16, String),
    }

    fn out_frame() -> impl Strategy<Value = Out> {
        let len = prop_oneof![
            4 => 0usize..300,
            1 => 65_530usize..65_540,
            1 => Just(70_000usize),
        ];
        let body = (len, any::<u8>()).prop_map(|(n, k)| {
            (0..n)
                .map(|i| (i as u8).wrapping_mul(k | 1))
                .collect::<Vec<u8>>()
        });
        let control = prop::collection::vec(any::<u8>(), 0..=125);
        let code = prop_oneof![1000u16..=1003, 1007u16..=1014, 3000u16..=4999];
        prop_oneof![
            ".{0,120}".prop_map(|s: String| Out::Data(TEXT, s.into_bytes())),
            body.prop_map(|b| Out::Data(BINARY, b)),
            control.clone().prop_map(|b| Out::Data(PING, b)),
            control.prop_map(|b| Out::Data(PONG, b)),
            (code, "[a-zé ]{0,60}").prop_map(|(c, r)| Out::Close(c, r)),
        ]
    }

    fn expected(f: &Out) -> Frame {
        match f {
            Out::Data(op, b) => {
                let b = Bytes::from(b.clone());
                match *op {
                    TEXT => Frame::Text(b),
                    BINARY => Frame::Binary(b),
                    PING => Frame::Ping(b),
                    _ => Frame::Pong(b),
                }
            }
            Out::Close(code, reason) => {
                let mut cut = reason.len().min(123);
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                Frame::Close(Some(actix_http::ws::CloseReason {
                    code: (*code).into(),
                    description: (cut > 0).then(|| reason[..cut].to_string()),
                }))
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

        /// What wsframe writes, actix reads back frame for frame, however the
        /// bytes are split on arrival.
        #[test]
        fn wsframe_output_reads_back_through_actix(
            frames in prop::collection::vec(out_frame(), 1..4),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        ) {
            let mut wire = BytesMut::new();
            for f in &frames {
                match f {
                    Out::Data(op, b) => {
                        let (a, z) = b.split_at(b.len() / 2);
                        write(&mut wire, *op, &[a, z]);
                    }
                    Out::Close(code, reason) => write_close(&mut wire, *code, reason),
                }
            }
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(wire.len() + 1)).collect();
            points.sort_unstable();
            let mut codec = Codec::new().client_mode().max_size(1 << 20);
            let mut buf = BytesMut::new();
            let mut got = Vec::new();
            let mut at = 0;
            for end in points.into_iter().chain(std::iter::once(wire.len())) {
                buf.extend_from_slice(&wire[at..end]);
                at = end;
                while let Some(frame) = codec.decode(&mut buf).expect("a valid frame") {
                    got.push(frame);
                }
            }
            prop_assert!(buf.is_empty());
            let want: Vec<Frame> = frames.iter().map(expected).collect();
            prop_assert_eq!(got, want);
        }
    }
}
