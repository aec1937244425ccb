//! A token bucket: how many frames a session may send.

use std::time::Instant;

/// Refills `rate` tokens per second up to `burst`; each frame takes one.
#[derive(Debug)]
pub struct RateLimiter {
    rate: f64,
    burst: f64,
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
        let burst = f64::from(burst.max(1));
        RateLimiter {
            rate: f64::from(rate_per_s.max(1)),
            burst,
            tokens: burst,
            last: Instant::now(),
            refused_run: 0,
        }
    }

    /// Takes a token for a frame arriving `now`.
    pub fn check(&mut self, now: Instant) -> Verdict {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.refused_run = 0;
            Verdict::Allow
        } else {
            self.refused_run = self.refused_run.saturating_add(1);
            if f64::from(self.refused_run) > self.burst.min(1000.0) {
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
}
