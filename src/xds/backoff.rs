//! Pauses between reconnection attempts: exponential, capped, jittered (see [`Backoff`]). The
//! random draw is passed in, so the sequence is a pure function of the attempts and the draws.

use std::time::Duration;

use super::Backoff;

/// The attempts made since the last stream that delivered a response.
#[derive(Debug)]
pub(super) struct Retries {
    settings: Backoff,
    attempt: u32,
}

impl Retries {
    pub(super) fn new(settings: Backoff) -> Self {
        Self {
            settings,
            attempt: 0,
        }
    }

    /// Starts the sequence again (the stream worked for a while).
    pub(super) fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The pause before the next attempt, given a uniform draw `unit` in `[0, 1)`.
    pub(super) fn next(&mut self, unit: f64) -> Duration {
        let Backoff {
            initial,
            max,
            random_factor,
            jitter,
        } = self.settings;
        // The exponent stops growing at the cap (or at 2^31, whichever comes first).
        let nominal = initial
            .checked_mul(1 << self.attempt)
            .map_or(max, |pause| pause.min(max));
        if nominal < max {
            self.attempt = (self.attempt + 1).min(31);
        }
        if jitter {
            nominal.mul_f64(1.0 - random_factor.clamp(0.0, 1.0) * unit.clamp(0.0, 1.0))
        } else {
            nominal
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn settings(jitter: bool) -> Backoff {
        Backoff {
            initial: secs(1.0),
            max: secs(10.0),
            random_factor: 0.5,
            jitter,
        }
    }

    /// Without jitter the pause doubles from the initial one and stays at the cap.
    #[test]
    fn doubles_up_to_the_cap() {
        let mut retries = Retries::new(settings(false));
        let pauses: Vec<Duration> = (0..7).map(|_| retries.next(0.9)).collect();
        let expected = [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0].map(secs);
        assert_eq!(pauses, expected);
    }

    /// Jitter draws each pause from [nominal × (1 − factor), nominal]: never above the cap.
    #[test]
    fn jitter_stays_within_its_band() {
        let mut retries = Retries::new(settings(true));
        assert_eq!(retries.next(0.0), secs(1.0));
        assert_eq!(retries.next(1.0), secs(1.0), "2 s × (1 − 0.5 × 1)");
        assert_eq!(retries.next(0.5), secs(3.0), "4 s × 0.75");
        assert_eq!(retries.next(0.25), secs(7.0), "8 s × 0.875");
        for _ in 0..40 {
            let pause = retries.next(0.999);
            assert!(pause >= secs(5.0) && pause <= secs(10.0), "{pause:?}");
        }
    }

    /// A reset starts again from the initial pause; many attempts cannot overflow.
    #[test]
    fn reset_and_no_overflow() {
        let mut retries = Retries::new(Backoff {
            max: Duration::MAX,
            ..settings(false)
        });
        for _ in 0..100 {
            retries.next(0.0);
        }
        assert_eq!(retries.next(0.0), Duration::from_secs(1 << 31));
        retries.reset();
        assert_eq!(retries.next(0.0), secs(1.0));
    }
}
