//! The permission check every frame passes before it runs: one place,
//! in front of [`Session::handle`]'s dispatch, so an operation added
//! later is checked by adding its line here.

use crate::auth::{Principal, Right};
use crate::protocol::codec::Format;
use crate::protocol::frame::{ClientFrame, ErrorCode};
use crate::session::Session;

/// Whether the session's principal may run `frame`; if not, the client
/// has been told (`forbidden`, or `unauthorized` when the session has
/// not authenticated, which then closes).
pub(in crate::session) fn permitted(
    session: &mut Session,
    format: Format,
    frame: &ClientFrame,
) -> bool {
    // Borrowed, not cloned: this runs for every frame.
    let Some(p) = session.principal.as_ref() else {
        session.error(
            format,
            ErrorCode::Unauthorized,
            "credentials are required: send hello with a token first",
            frame.rid(),
        );
        return false;
    };
    let denied: Option<Right<'_>> = match frame {
        ClientFrame::Publish(f) => {
            // Disjoint fields: the cache is written, the principal read.
            (!session.may_publish.may(p, &f.topic)).then_some(Right::Publish(&f.topic))
        }
        ClientFrame::Subscribe(f) => {
            if !p.may(Right::Subscribe(&f.filter)) {
                Some(Right::Subscribe(&f.filter))
            } else if f.durable && !p.may(Right::ConsumeFilter(&f.filter)) {
                Some(Right::ConsumeFilter(&f.filter))
            } else {
                None
            }
        }
        ClientFrame::Presence(f) => check(p, Right::Subscribe(&f.topic)),
        ClientFrame::Enqueue(f) => check(p, Right::Enqueue(&f.queue)),
        ClientFrame::DeleteQueue(_) => check(p, Right::Admin),
        ClientFrame::Consume(f) => check(p, Right::Consume(&f.queue)),
        ClientFrame::JobEnqueue(f) => check(p, Right::EnqueueJob(&f.kind)),
        // No kinds: every kind.
        ClientFrame::WorkerRegister(f) if f.kinds.is_empty() => check(p, Right::WorkAllJobs),
        ClientFrame::WorkerRegister(f) => f
            .kinds
            .iter()
            .map(|k| Right::WorkJob(k))
            .find(|r| !p.may(*r)),
        ClientFrame::WorkerPing(_) | ClientFrame::JobDequeue(_) | ClientFrame::JobOutcome(_) => {
            (!p.grants().works_any()).then_some(Right::WorkJob("*"))
        }
        // Answered only for kinds it may see (jobs.rs).
        ClientFrame::JobStatus(_) => (!p.grants().any_jobs()).then_some(Right::EnqueueJob("*")),
        // Settling and ending what the session already holds, pings,
        // transactions (their operations are checked as staged), hello
        // and refresh (authentication itself).
        ClientFrame::Hello(_)
        | ClientFrame::Refresh(_)
        | ClientFrame::Unsubscribe(_)
        | ClientFrame::Ping(_)
        | ClientFrame::Close(_)
        | ClientFrame::Ack(_)
        | ClientFrame::Nack(_)
        | ClientFrame::Reject(_)
        | ClientFrame::Touch(_)
        | ClientFrame::Begin(_)
        | ClientFrame::Commit(_)
        | ClientFrame::Rollback(_) => None,
    };
    let Some(right) = denied else {
        return true;
    };
    let what = right.object().map_or(String::new(), |o| format!(" {o:?}"));
    session.error(
        format,
        ErrorCode::Forbidden,
        format!("{:?} may not {}{what}", p.name(), right.name()),
        frame.rid(),
    );
    false
}

fn check<'a>(p: &Principal, right: Right<'a>) -> Option<Right<'a>> {
    (!p.may(right)).then_some(right)
}
