//! Grids, shares and the strategies they become.

use std::num::NonZeroU32;

use super::*;

fn rate(requests: u64, window_seconds: u64, burst: u64) -> SharedRate {
    SharedRate {
        requests,
        window: window_seconds * SECOND,
        burst,
    }
}

fn bucket(max: u32, tpf: u32, interval: u32) -> Strategy {
    Strategy::TokenBucket {
        max_tokens: NonZeroU32::new(max).unwrap(),
        tokens_per_fill: NonZeroU32::new(tpf).unwrap(),
        fill_interval_seconds: NonZeroU32::new(interval).unwrap(),
    }
}

#[test]
fn the_interval_holds_about_a_hundred_tokens_within_the_window() {
    // 10/s: 10 s holds 100 tokens.
    let grid = Grid::of(&rate(600, 60, 600), 1.0);
    assert_eq!((grid.interval, grid.tokens, grid.burst), (10, 100, 600));
    // 1,000/s: one second already holds 1,000.
    assert_eq!(Grid::of(&rate(1_000, 1, 50), 1.0).interval, 1);
    // 10/s over a 1 s window: still 10 s and 100 tokens (Envoy refills continuously).
    assert_eq!(Grid::of(&rate(10, 1, 20), 1.0).interval, 10);
    // 5 a minute: the interval stops at the window.
    let slow = Grid::of(&rate(5, 60, 5), 1.0);
    assert_eq!((slow.interval, slow.tokens), (60, 5));
    // 1,000 an hour: 360 s holds 100 tokens.
    assert_eq!(Grid::of(&rate(1_000, 3_600, 10), 1.0).interval, 360);
    // One an hour still gets a token per fill.
    assert_eq!(Grid::of(&rate(1, 3_600, 1), 1.0).tokens, 1);
}

#[test]
fn a_portion_cuts_tokens_and_burst() {
    let grid = Grid::of(&rate(600, 60, 600), 0.5);
    assert_eq!((grid.interval, grid.tokens, grid.burst), (10, 50, 300));
}

#[test]
fn shares_become_strategies_and_back() {
    let share = Share {
        tokens: 30,
        burst: 7,
    };
    assert_eq!(share.strategy(10), bucket(7, 30, 10));
    assert_eq!(Share::of(Some(bucket(7, 30, 10)), 10), share);
    assert_eq!(
        Share {
            tokens: 0,
            burst: 3
        }
        .strategy(10),
        Strategy::DenyAll
    );
    assert_eq!(Share::of(Some(Strategy::AllowAll), 10), Share::ALL);
    // Another interval is rounded up: 7 per 3 s is 23.3 per 10 s.
    assert_eq!(Share::of(Some(bucket(1, 7, 3)), 10).tokens, 24);
}

#[test]
fn small_moves_keep_the_strategy() {
    let held = Some(bucket(50, 100, 10));
    assert!(!material(held, bucket(50, 95, 10), 10));
    assert!(material(held, bucket(50, 89, 10), 10));
    assert!(!material(Some(bucket(5, 5, 10)), bucket(5, 6, 10), 10));
    assert!(material(Some(bucket(5, 5, 10)), bucket(5, 7, 10), 10));
    assert!(material(None, bucket(5, 5, 10), 10));
    assert!(material(Some(Strategy::DenyAll), bucket(1, 1, 10), 10));
    assert!(material(Some(bucket(50, 100, 5)), bucket(50, 100, 10), 10));
}

#[test]
fn a_change_of_the_interval_alone_is_made_visible() {
    let held = Some(bucket(50, 100, 5));
    assert_eq!(distinct(held, bucket(50, 100, 10)), bucket(50, 99, 10));
    assert_eq!(
        distinct(Some(bucket(3, 1, 5)), bucket(3, 1, 10)),
        bucket(2, 1, 10)
    );
    assert_eq!(
        distinct(Some(bucket(1, 1, 5)), bucket(1, 1, 10)),
        Strategy::DenyAll
    );
    assert_eq!(distinct(held, bucket(40, 100, 10)), bucket(40, 100, 10));
}
