//! The primitive fields of MQTT packets: big-endian integers, variable
//! byte integers, length-prefixed UTF-8 strings and binary data. Reading
//! checks every length against what is there; writing goes through
//! [`Emit`], so an encoding's length is computed by the very code that
//! writes it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::{MqttError, malformed};

/// The largest value of a variable byte integer (four bytes).
pub(super) const VAR_INT_MAX: u32 = 268_435_455;

/// The unread rest of a packet body.
pub(super) struct Reader(pub(super) Bytes);

impl Reader {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn u8(&mut self) -> Result<u8, MqttError> {
        if self.0.is_empty() {
            return Err(malformed("truncated"));
        }
        Ok(self.0.get_u8())
    }

    pub(super) fn u16(&mut self) -> Result<u16, MqttError> {
        if self.0.len() < 2 {
            return Err(malformed("truncated"));
        }
        Ok(self.0.get_u16())
    }

    pub(super) fn u32(&mut self) -> Result<u32, MqttError> {
        if self.0.len() < 4 {
            return Err(malformed("truncated"));
        }
        Ok(self.0.get_u32())
    }

    /// A variable byte integer: at most four bytes, and no more than its
    /// value needs (MQTT-1.5.5-1).
    pub(super) fn var_int(&mut self) -> Result<u32, MqttError> {
        let mut value = 0u32;
        for i in 0..4 {
            let b = self.u8()?;
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(MqttError::BadVarInt);
                }
                return Ok(value);
            }
        }
        Err(MqttError::BadVarInt)
    }

    /// Binary data: a two-byte length and that many bytes.
    pub(super) fn bytes(&mut self) -> Result<Bytes, MqttError> {
        let n = usize::from(self.u16()?);
        if self.0.len() < n {
            return Err(malformed("truncated string"));
        }
        Ok(self.0.split_to(n))
    }

    /// A UTF-8 string: well-formed and without U+0000.
    pub(super) fn string(&mut self) -> Result<String, MqttError> {
        let b = self.bytes()?;
        let s = std::str::from_utf8(&b).map_err(|_| malformed("string is not UTF-8"))?;
        if s.contains('\0') {
            return Err(malformed("string contains NUL"));
        }
        Ok(s.to_owned())
    }

    /// The next `n` bytes as a reader of their own.
    pub(super) fn take(&mut self, n: usize) -> Result<Reader, MqttError> {
        if self.0.len() < n {
            return Err(malformed("truncated properties"));
        }
        Ok(Reader(self.0.split_to(n)))
    }

    /// Everything left.
    pub(super) fn rest(&mut self) -> Bytes {
        std::mem::take(&mut self.0)
    }

    pub(super) fn done(&self) -> Result<(), MqttError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(malformed("trailing bytes"))
        }
    }
}

/// Where encoded fields go: a buffer, or a counter of their length.
pub(super) trait Emit {
    fn u8(&mut self, v: u8);
    fn u16(&mut self, v: u16);
    fn u32(&mut self, v: u32);
    fn var_int(&mut self, v: usize);
    /// Two-byte length and the bytes (cut at 65535).
    fn bytes(&mut self, v: &[u8]);
}

impl Emit for BytesMut {
    fn u8(&mut self, v: u8) {
        self.put_u8(v);
    }
    fn u16(&mut self, v: u16) {
        self.put_u16(v);
    }
    fn u32(&mut self, v: u32) {
        self.put_u32(v);
    }
    fn var_int(&mut self, v: usize) {
        put_len(self, v);
    }
    fn bytes(&mut self, v: &[u8]) {
        put_str(self, v);
    }
}

/// Counts the bytes an encoding takes.
#[derive(Default)]
pub(super) struct Count(pub(super) usize);

impl Emit for Count {
    fn u8(&mut self, _: u8) {
        self.0 += 1;
    }
    fn u16(&mut self, _: u16) {
        self.0 += 2;
    }
    fn u32(&mut self, _: u32) {
        self.0 += 4;
    }
    fn var_int(&mut self, v: usize) {
        self.0 += var_int_len(v);
    }
    fn bytes(&mut self, v: &[u8]) {
        self.0 += str_len(v);
    }
}

/// Writes a variable byte integer (the remaining length's encoding).
pub(super) fn put_len(out: &mut BytesMut, mut len: usize) {
    loop {
        let mut b = (len % 128) as u8;
        len /= 128;
        if len > 0 {
            b |= 0x80;
        }
        out.put_u8(b);
        if len == 0 {
            break;
        }
    }
}

/// The encoded length of a variable byte integer.
pub(super) fn var_int_len(mut v: usize) -> usize {
    let mut n = 1;
    while v >= 128 {
        v /= 128;
        n += 1;
    }
    n
}

pub(super) fn put_str(out: &mut BytesMut, s: &[u8]) {
    let n = s.len().min(usize::from(u16::MAX));
    out.put_u16(n as u16);
    out.put_slice(&s[..n]);
}

/// The encoded length of a string field.
pub(super) fn str_len(s: &[u8]) -> usize {
    2 + s.len().min(usize::from(u16::MAX))
}
