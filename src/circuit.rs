//! A circuit breaker per upstream, fed by connection failures of calls and
//! catalog fetches.
//!
//! After `threshold` consecutive connection failures the circuit opens: calls
//! fail fast for `cooldown` instead of each waiting for a connect timeout.
//! Then one probe at a time is let through (half-open); its success closes the
//! circuit, its failure opens it again. Lock-free: a few atomics.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

// tokio's clock: the same as std's in the gateway (no test-util there), and
// one the tests can pause and advance instead of sleeping.
use tokio::time::Instant;

/// One upstream's circuit.
#[derive(Debug)]
pub struct Circuit {
    threshold: u32,
    cooldown: Duration,
    epoch: Instant,
    failures: AtomicU32,
    /// Milliseconds since `epoch` until which the circuit is open; 0 = closed.
    open_until_ms: AtomicU64,
}

/// What the circuit says about sending a call now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Closed: send.
    Pass,
    /// Half-open and this caller is the one probe: send, and report back.
    Probe,
    /// Open: do not send; retry after this long.
    Reject(Duration),
}

impl Circuit {
    /// A closed circuit.
    pub fn new(threshold: u32, cooldown: Duration) -> Circuit {
        Circuit {
            threshold: threshold.max(1),
            cooldown,
            epoch: Instant::now(),
            failures: AtomicU32::new(0),
            open_until_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether a call may go out now.
    pub fn admit(&self) -> Admission {
        let open_until = self.open_until_ms.load(Ordering::Acquire);
        if open_until == 0 {
            return Admission::Pass;
        }
        let now = self.now_ms();
        if now < open_until {
            return Admission::Reject(Duration::from_millis(open_until - now));
        }
        // Cooled down: exactly one caller wins the probe, and the next probe
        // is a cooldown away, so a probe that never reports back (its client
        // went away) cannot wedge the circuit.
        let next = now.saturating_add(self.cooldown_ms());
        match self.open_until_ms.compare_exchange(open_until, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Admission::Probe,
            Err(_) => Admission::Reject(self.cooldown),
        }
    }

    fn cooldown_ms(&self) -> u64 {
        u64::try_from(self.cooldown.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    /// A connection was made (whatever the answer): close the circuit.
    pub fn record_success(&self) {
        self.failures.store(0, Ordering::Release);
        self.open_until_ms.store(0, Ordering::Release);
    }

    /// A connection could not be made. A failed probe finds the count
    /// already at the threshold, so it opens the circuit again.
    pub fn record_failure(&self) {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        if failures >= self.threshold {
            let until = self.now_ms().saturating_add(self.cooldown_ms());
            self.open_until_ms.store(until.max(1), Ordering::Release);
        }
    }

    /// Whether calls are currently being refused.
    pub fn is_open(&self) -> bool {
        self.open_until_ms.load(Ordering::Acquire) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_after_threshold_and_lets_one_probe_through() {
        let c = Circuit::new(3, Duration::from_millis(30));
        for _ in 0..2 {
            c.record_failure();
            assert_eq!(c.admit(), Admission::Pass);
        }
        c.record_failure();
        assert!(matches!(c.admit(), Admission::Reject(_)));
        // Past the cooldown, on the paused clock.
        tokio::time::advance(Duration::from_millis(40)).await;
        assert_eq!(c.admit(), Admission::Probe);
        assert!(matches!(c.admit(), Admission::Reject(_)), "only one probe at a time");
        c.record_failure();
        assert!(matches!(c.admit(), Admission::Reject(_)), "a failed probe opens it again");
        // Past the cooldown, on the paused clock.
        tokio::time::advance(Duration::from_millis(40)).await;
        assert_eq!(c.admit(), Admission::Probe);
        c.record_success();
        assert_eq!(c.admit(), Admission::Pass);
        assert!(!c.is_open());
    }
}
