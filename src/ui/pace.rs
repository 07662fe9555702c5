//! The pace of the page's API: at most [`RATE`] calls a second across every `/ui/api/` route,
//! the rest waiting their turn (at most [`LONGEST_WAIT`]) or refused `429` with `Retry-After`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

/// Calls a second the page's API serves. An open page asks for three or four every 2 s; a
/// person explaining requests, a few more. Clients polling back to back (the API asks for no
/// credentials) then cost the server fifty small answers a second, not the listener's thread.
pub(super) const RATE: u32 = 50;

/// The longest a call waits for its turn before it is refused. It bounds the connections
/// waiting (about [`RATE`] of them) well below the listener's cap: a flood of the page's API
/// leaves room for `/healthcheck` and `/metrics`.
pub(super) const LONGEST_WAIT: Duration = Duration::from_secs(1);

/// The turns handed out: when the next one falls.
#[derive(Debug)]
pub(super) struct Pacer {
    next: Mutex<Option<Instant>>,
}

impl Pacer {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            next: Mutex::new(None),
        })
    }

    /// The turn of a call arriving at `now`: when it may be served, or, when that is more than
    /// [`LONGEST_WAIT`] away, how long it would have waited (no turn taken).
    pub(super) fn turn(&self, now: Instant) -> Result<Instant, Duration> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let turn = next.map_or(now, |next| next.max(now));
        let wait = turn - now;
        if wait > LONGEST_WAIT {
            return Err(wait);
        }
        *next = Some(turn + Duration::from_secs(1) / RATE);
        Ok(turn)
    }
}

/// Serves a call of the page's API in its turn, or refuses it `429 Too Many Requests`.
pub(super) async fn paced(
    State(pacer): State<Arc<Pacer>>,
    request: Request,
    next: Next,
) -> Response {
    match pacer.turn(Instant::now()) {
        Ok(turn) => {
            tokio::time::sleep_until(turn).await;
            next.run(request).await
        }
        Err(wait) => {
            // A call would get a turn again once the wait falls to the longest allowed.
            let after = wait.saturating_sub(LONGEST_WAIT);
            let seconds = (after.as_secs() + u64::from(after.subsec_nanos() > 0)).max(1);
            let mut response = super::json_response(
                StatusCode::TOO_MANY_REQUESTS,
                serde_json::json!({ "error": "the page's API is busy: try again later" }),
            );
            (response.headers_mut()).insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            response.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LONGEST_WAIT, Pacer, RATE};
    use std::time::Duration;
    use tokio::time::Instant;

    const GAP: Duration = Duration::from_millis(1000 / RATE as u64);

    #[test]
    fn calls_take_turns_a_fiftieth_of_a_second_apart() {
        let pacer = Pacer::new();
        let t0 = Instant::now();
        assert_eq!(pacer.turn(t0), Ok(t0), "the first is served at once");
        assert_eq!(pacer.turn(t0), Ok(t0 + GAP));
        assert_eq!(pacer.turn(t0 + GAP / 2), Ok(t0 + 2 * GAP));
        // After a quiet second the next call is served at once again: turns are not saved up.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(pacer.turn(later), Ok(later));
        assert_eq!(pacer.turn(later), Ok(later + GAP));
    }

    #[test]
    fn a_call_that_would_wait_too_long_is_refused_and_takes_no_turn() {
        let pacer = Pacer::new();
        let t0 = Instant::now();
        // Turns 0..=50 fall at 0, 20 ms, …, 1.00 s: the last waits exactly the longest wait.
        let turns = (LONGEST_WAIT.as_millis() / GAP.as_millis()) as u32;
        for n in 0..=turns {
            assert_eq!(pacer.turn(t0), Ok(t0 + n * GAP), "turn {n}");
        }
        // The next would fall at 1.02 s.
        assert_eq!(pacer.turn(t0), Err(LONGEST_WAIT + GAP));
        assert_eq!(pacer.turn(t0), Err(LONGEST_WAIT + GAP), "no turn was taken");
        // 20 ms on, it waits exactly the longest wait again, and is served.
        assert_eq!(pacer.turn(t0 + GAP), Ok(t0 + LONGEST_WAIT + GAP));
    }
}
