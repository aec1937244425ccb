//! Instants in 8 bytes. An idle connection keeps a few instants (its last
//! packet, its credential's expiry, its rate limiter's time), and an
//! `Instant` is 16 B: times thousands of connections, the difference is
//! what keeps a parked MQTT/TCP connection in a smaller allocation.

use std::num::NonZeroU64;
use std::time::{Duration, Instant};

/// Where stamps count from: an hour before the first look (where the
/// platform's clock reaches back that far), so that an instant read just
/// before it is not cut to it.
fn epoch() -> Instant {
    static EPOCH: std::sync::LazyLock<Instant> = std::sync::LazyLock::new(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
    });
    *EPOCH
}

/// An instant as nanoseconds past the process's epoch, plus one (never
/// zero, so `Option<Stamp>` is 8 B too). Good for 584 years; earlier
/// instants than the epoch count as the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Stamp(NonZeroU64);

impl Stamp {
    /// The stamp of `at`.
    pub fn of(at: Instant) -> Stamp {
        let ns = at.saturating_duration_since(epoch()).as_nanos();
        let ns = u64::try_from(ns).unwrap_or(u64::MAX).saturating_add(1);
        Stamp(NonZeroU64::new(ns).unwrap_or(NonZeroU64::MAX))
    }

    /// The stamp of now.
    pub fn now() -> Stamp {
        Stamp::of(Instant::now())
    }

    /// The instant it stands for (to within a nanosecond).
    pub fn instant(self) -> Instant {
        epoch() + Duration::from_nanos(self.0.get() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_comes_back_and_order_is_kept() {
        let a = Instant::now();
        let b = a + Duration::from_millis(1500);
        let (sa, sb) = (Stamp::of(a), Stamp::of(b));
        assert_eq!(sa.instant(), a);
        assert_eq!(sb.instant(), b);
        assert!(sa < sb);
        assert_eq!(std::mem::size_of::<Option<Stamp>>(), 8);
    }

    #[test]
    fn an_instant_before_the_epoch_counts_as_the_epoch() {
        let early = epoch().checked_sub(Duration::from_secs(1));
        if let Some(early) = early {
            assert_eq!(Stamp::of(early).instant(), epoch());
        }
    }
}
