//! Wire protocols, pure: frame types and codecs, no I/O, nothing from actix,
//! sled or tokio. Each decoder returns a typed error for bad input and
//! never panics (property tests feed it arbitrary bytes).
//!
//! - [`frame`]: the native protocol's frames (proto/native.md).
//! - [`jobs`]: the job and worker frames.
//! - [`mqtt`]: MQTT 3.1, 3.1.1 and 5 packets.
//! - [`codec`]: their JSON and bincode encodings; `decode_error` turns
//!   decode failures into errors naming the op, the field and the `rid`.

pub mod code;
pub mod codec;
mod decode_error;
pub mod frame;
pub mod jobs;
pub mod mqtt;
mod presence;
mod recover;

pub use codec::{DecodeError, Format, decode_client, decode_server, encode_client, encode_server};
pub use frame::{ClientFrame, ErrorCode, ServerFrame};
