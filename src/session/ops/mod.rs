//! One function per client operation, each in the file of its family, so
//! adding an operation touches one file and one line of
//! [`Session::handle`](super::Session::handle)'s dispatch. Each takes the
//! session, the format the frame arrived in and the frame's struct, and
//! answers through the session's outbound queue; none touches a socket.
//!
//! Transaction frames (`begin`, `commit`, `rollback`, and what they stage)
//! are in `session/txn.rs`; job and worker frames in `session/jobs.rs`.

mod consume;
mod control;
mod delete;
mod enqueue;
mod hello;
mod permit;
pub(super) mod presence;
mod publish;
mod settle;
mod subscribe;

pub(super) use consume::consume;
pub(super) use control::{close, ping};
pub(super) use delete::delete_queue;
pub(super) use enqueue::enqueue;
pub(super) use hello::{hello, refresh};
pub(super) use permit::permitted;
pub(super) use presence::presence;
pub(super) use publish::publish;
pub(super) use settle::{ack, nack, reject, touch};
pub(super) use subscribe::{subscribe, unsubscribe};
