//! A token bucket: how many frames a session may send. The native
//! protocol refuses a frame past the rate (and closes far past it); MQTT,
//! which has no way to refuse a packet, is slowed instead
//! ([`RateLimiter::charge`]): its connection is not read until it is back
//! within the rate. Neither counts a client's settlement of what the
//! broker delivered to it (native `ack`, `nack`, `reject`, `touch`; MQTT
//! PUBACK, PUBREC, PUBCOMP): those are bounded by the delivery windows,
//! and a fast subscriber must never be cut off for keeping up.

use std::time::{Duration, Instant};

use super::Stamp;

/// Refills `rate` tokens per second up to `burst`; each frame takes one.
#[derive(Debug)]
pub struct RateLimiter {
    /// Tokens a second, and the most the bucket holds: whole numbers,
    /// kept as such (8 B less in every connection's state than as `f64`).
    rate: u32,
    burst: u32,
    tokens: f64,
    last: Instant,
    /// Frames refused in a row; reset by an accepted frame.
    refused_run: u32,
}

/// What to do with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the rate.
    Allow,
    /// Over the rate: refuse this frame with an error.
    Refuse,
    /// Over the rate for as long again as the burst: close the session.
    Close,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(rate_per_s: u32, burst: u32) -> Self {
        let burst = burst.max(1);
        RateLimiter {
            rate: rate_per_s.max(1),
            burst,
            tokens: f64::from(burst),
            last: Instant::now(),
            refused_run: 0,
        }
    }

    /// Takes `n` tokens for frames that arrived by `now`, going into debt
    /// past an empty bucket: how long to stop reading the connection so
    /// that it keeps to the rate (zero within it; at most a second per
    /// call, the rest of a debt is waited for at the next). The pause is
    /// counted as passed, so that frames of the same read (which share
    /// its `now`) are not charged for it again.
    pub fn charge(&mut self, now: Instant, n: u32) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * f64::from(self.rate)).min(f64::from(self.burst))
            - f64::from(n);
        if self.tokens >= 0.0 {
            return Duration::ZERO;
        }
        let pause = (-self.tokens / f64::from(self.rate)).min(1.0);
        self.tokens += pause * f64::from(self.rate);
        let pause = Duration::from_secs_f64(pause);
        self.last += pause;
        pause
    }

    /// The bucket's state without its rate and burst, which its owner
    /// gives again to [`RateLimiter::resumed`]: what a parked MQTT
    /// connection keeps (tokens, and their time as a [`Stamp`]: 12 B
    /// rather than 40).
    pub fn parked(&self) -> (f32, Stamp) {
        // Tokens are at most the burst and at least a second's rate below
        // zero: f32 keeps them to within a token up to 16 million, and to
        // one part in ten million past that.
        #[allow(clippy::cast_possible_truncation)]
        let tokens = self.tokens as f32;
        (tokens, Stamp::of(self.last))
    }

    /// A bucket of `rate_per_s` and `burst` as [`RateLimiter::parked`]
    /// left it.
    pub fn resumed(rate_per_s: u32, burst: u32, (tokens, at): (f32, Stamp)) -> Self {
        let mut r = RateLimiter::new(rate_per_s, burst);
        r.tokens = f64::from(tokens).min(f64::from(r.burst));
        r.last = at.instant();
        r
    }

    /// Takes a token for a frame arriving `now`.
    pub fn check(&mut self, now: Instant) -> Verdict {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * f64::from(self.rate)).min(f64::from(self.burst));
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.refused_run = 0;
            Verdict::Allow
        } else {
            self.refused_run = self.refused_run.saturating_add(1);
            if f64::from(self.refused_run) > f64::from(self.burst).min(1000.0) {
                Verdict::Close
            } else {
                Verdict::Refuse
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A parked connection's bucket comes back as it was: what it had
    /// spent is not refilled by the park.
    #[test]
    fn a_bucket_parked_and_resumed_keeps_its_debt() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(100, 10);
        assert!(r.charge(t0, 10).is_zero());
        let mut again = RateLimiter::resumed(100, 10, r.parked());
        let (a, b) = (r.charge(t0, 5), again.charge(t0, 5));
        assert!(!a.is_zero());
        assert!(a.abs_diff(b) < Duration::from_micros(100), "{a:?} vs {b:?}");
    }

    #[test]
    fn burst_then_refuse_then_close_then_refill() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(10, 3);
        for _ in 0..3 {
            assert_eq!(r.check(t0), Verdict::Allow);
        }
        for _ in 0..3 {
            assert_eq!(r.check(t0), Verdict::Refuse);
        }
        assert_eq!(r.check(t0), Verdict::Close);
        assert_eq!(r.check(t0 + Duration::from_millis(100)), Verdict::Allow);
    }

    #[test]
    fn charging_past_the_bucket_asks_for_a_pause_as_long_as_the_debt() {
        let t0 = Instant::now();
        let mut r = RateLimiter::new(1000, 100);
        assert_eq!(r.charge(t0, 100), Duration::ZERO, "the burst is free");
        // 50 more at once: 50 tokens owed at 1000/s = 50 ms.
        let pause = r.charge(t0, 50);
        assert!((49..=51).contains(&pause.as_millis()), "{pause:?}");
        // The pause counts as passed: one more frame of the same read
        // costs its own 1 ms, not the 50 again.
        let pause = r.charge(t0, 1);
        assert!(pause <= Duration::from_millis(2), "{pause:?}");
        // A huge debt asks for a second at most per call, and the rest
        // at the next.
        assert_eq!(r.charge(t0, 1_000_000), Duration::from_secs(1));
        assert_eq!(r.charge(t0, 0), Duration::from_secs(1));
    }
}
