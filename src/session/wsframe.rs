//! Writing WebSocket frames (RFC 6455) from the server side: unmasked, one
//! header followed by the payload parts, straight into the write buffer.

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
