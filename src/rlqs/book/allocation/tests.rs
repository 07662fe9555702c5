//! Water-filling and rounding: fair, exact, never above the total.

use proptest::prelude::*;

use super::*;

#[test]
fn a_small_want_is_met_and_the_rest_is_split_evenly() {
    assert_eq!(water_fill(100, &[Some(10.0), None, None]), vec![10, 45, 45]);
    assert_eq!(
        water_fill(100, &[Some(10.0), Some(80.0), Some(80.0)]),
        vec![10, 45, 45]
    );
}

#[test]
fn leftover_is_spread_so_the_shares_reach_the_total() {
    assert_eq!(water_fill(100, &[Some(10.0), Some(20.0)]), vec![45, 55]);
    assert_eq!(
        water_fill(10, &[Some(0.0), Some(0.0), Some(0.0)])
            .iter()
            .sum::<u64>(),
        10
    );
}

#[test]
fn unknown_wants_take_the_fair_share() {
    assert_eq!(water_fill(90, &[None, None, None]), vec![30, 30, 30]);
    assert_eq!(water_fill(7, &[]), Vec::<u64>::new());
}

#[test]
fn proportional_follows_the_weights_with_one_at_least() {
    assert_eq!(proportional(10, &[1, 1, 8]), vec![1, 1, 8]);
    assert_eq!(proportional(12, &[1, 1, 8]), vec![1, 1, 10]);
    assert_eq!(proportional(2, &[5, 9, 1]), vec![1, 1, 0]);
    assert_eq!(proportional(10, &[1, 30, 30]), vec![1, 5, 4]);
    assert_eq!(proportional(6, &[0, 3, 3]), vec![0, 3, 3]);
}

proptest! {
    #[test]
    fn shares_never_exceed_the_total(
        total in 0u64..5_000,
        wants in proptest::collection::vec(proptest::option::of(0.0f64..3_000.0), 0..40),
    ) {
        let shares = water_fill(total, &wants);
        prop_assert_eq!(shares.len(), wants.len());
        let sum: u64 = shares.iter().sum();
        prop_assert!(sum <= total);
        // Rounding loses at most one token per holder... and none when shares are spread.
        prop_assert!(wants.is_empty() || sum + wants.len() as u64 >= total);
        // Nobody wanting more than another gets less than it by more than a token.
        for (i, a) in wants.iter().enumerate() {
            for (j, b) in wants.iter().enumerate() {
                let (a, b) = (a.unwrap_or(f64::INFINITY), b.unwrap_or(f64::INFINITY));
                if a >= b {
                    prop_assert!(shares[i] + 1 >= shares[j]);
                }
            }
        }
    }

    #[test]
    fn proportional_never_exceeds_the_total(
        total in 0u64..5_000,
        weights in proptest::collection::vec(0u64..1_000, 0..40),
    ) {
        let out = proportional(total, &weights);
        prop_assert!(out.iter().sum::<u64>() <= total);
        for (o, w) in out.iter().zip(&weights) {
            prop_assert!(*w > 0 || *o == 0);
        }
    }
}
