//! Execs and `run_code` calls starting at once, admitted first come, first served.
//!
//! On a busy host, sandbox starts share the CPUs: a hundred execs admitted together each
//! get a hundredth of them, so they all finish near the end of the burst. Admitting at most
//! `max_starting` at a time, in arrival order, lets the first ones finish first with the
//! same throughput. An exec holds its place from before it is submitted until it ends or
//! has run for [`HOLD`], whichever comes first, so a long-running command never keeps
//! others waiting for longer than that. A request waiting for its turn has submitted
//! nothing: a client that goes away meanwhile starts no process and leaves no operation;
//! the wait counts against the request's timeout (not the exec's own, which starts with the
//! process).

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// The longest an exec holds its place among those starting.
pub const HOLD: Duration = Duration::from_millis(100);

/// The default number of execs starting at once: two per CPU the server may use.
pub fn default_max_starting() -> usize {
    2 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The places for execs starting (`0`: no bound).
pub struct Starts {
    places: Option<Arc<Semaphore>>,
    hold: Duration,
}

impl Starts {
    /// `max_starting` places, each held at most `hold`.
    pub fn with_hold(max_starting: usize, hold: Duration) -> Starts {
        Starts {
            places: (max_starting > 0).then(|| Arc::new(Semaphore::new(max_starting))),
            hold,
        }
    }

    /// Waits for a place (first come, first served). Cancel-safe: dropped while waiting,
    /// it takes no place.
    pub async fn admit(&self) -> Starting {
        let Some(sem) = &self.places else {
            return Starting {
                place: None,
                until: None,
            };
        };
        // The semaphore is never closed.
        let place = sem.clone().acquire_owned().await.ok();
        Starting {
            place,
            until: Some(Box::pin(tokio::time::sleep(self.hold))),
        }
    }

    /// Places free now (none: no bound).
    #[cfg(test)]
    fn available(&self) -> Option<usize> {
        self.places.as_ref().map(|s| s.available_permits())
    }
}

/// A place among the execs starting; given back when dropped, or by [`Starting::hold_over`]
/// once the hold time is over (no task of its own: whoever waits for the exec's next step
/// waits for this beside it).
pub struct Starting {
    place: Option<OwnedSemaphorePermit>,
    until: Option<Pin<Box<Sleep>>>,
}

impl Starting {
    /// Resolves when the hold time is over, giving the place back; pending for ever after
    /// that (or without a bound). Cancel-safe.
    pub async fn hold_over(&mut self) {
        match self.until.as_mut() {
            Some(t) => t.as_mut().await,
            None => std::future::pending::<()>().await,
        }
        self.until = None;
        self.place = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn places_are_given_in_order_and_back() {
        let s = Arc::new(Starts::with_hold(2, Duration::from_secs(3600)));
        let a = s.admit().await;
        let _b = s.admit().await;
        assert_eq!(s.available(), Some(0));
        // A third waits; dropping the waiter takes no place.
        let s2 = s.clone();
        let waiting = tokio::spawn(async move { s2.admit().await });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(a);
        let c = waiting.await.unwrap();
        assert_eq!(s.available(), Some(0));
        drop(c);
        assert_eq!(s.available(), Some(1));
    }

    #[tokio::test]
    async fn a_dropped_waiter_takes_no_place() {
        let s = Arc::new(Starts::with_hold(1, Duration::from_secs(3600)));
        let a = s.admit().await;
        let s2 = s.clone();
        let waiting = tokio::spawn(async move { s2.admit().await });
        tokio::task::yield_now().await;
        waiting.abort();
        let _ = waiting.await;
        drop(a);
        assert_eq!(s.available(), Some(1));
    }

    #[tokio::test]
    async fn a_long_run_gives_its_place_back_after_the_hold() {
        let s = Starts::with_hold(1, Duration::from_millis(10));
        let mut long = s.admit().await;
        assert_eq!(s.available(), Some(0));
        long.hold_over().await;
        assert_eq!(s.available(), Some(1));
        let _next = s.admit().await;
        assert_eq!(s.available(), Some(0));
        // Given back once only: dropping it later changes nothing.
        drop(long);
        assert_eq!(s.available(), Some(0));
    }

    #[tokio::test]
    async fn no_bound_with_zero() {
        let s = Starts::with_hold(0, HOLD);
        let _a = s.admit().await;
        let _b = s.admit().await;
        assert_eq!(s.available(), None);
    }
}
