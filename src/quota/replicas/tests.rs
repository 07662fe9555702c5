//! What a replica claims, and what it hands out before and after its first claim.

use super::*;
use crate::clock::SECOND;

#[test]
fn a_replica_claims_its_demand_and_a_part_of_the_spare() {
    // Alone and asking 2 of 10: everything.
    assert_eq!(wanted(10.0, 2.0, 0.0, 0), 1.0);
    // Two replicas asking 2 and 4 of 10: 2 + half of the spare 4.
    assert!((wanted(10.0, 2.0, 4.0, 1) - 0.4).abs() < 1e-12);
    // Over the limit together: in proportion to demand.
    assert!((wanted(10.0, 10.0, 30.0, 1) - 0.25).abs() < 1e-12);
    // Nothing known: an equal part.
    assert!((wanted(10.0, 0.0, 0.0, 3) - 0.25).abs() < 1e-12);
}

#[test]
fn before_a_claim_a_bucket_gets_an_equal_part_of_the_replicas_seen() {
    let portions = Portions::default();
    let bucket: BucketId = [("tenant".to_string(), "a".to_string())].into();
    let rate = QuotaRate {
        requests: 10,
        window: SECOND,
        burst: 10,
    };
    assert_eq!(portions.portion("quota", &bucket, &rate, 1.0), 1.0);
    portions.state().others = 2;
    assert!((portions.portion("quota", &bucket, &rate, 1.0) - 1.0 / 3.0).abs() < 1e-12);
    let claimed = Claimed {
        portion: 0.5,
        others_demand: 1.0,
        others: 1,
        floor: 0.5,
        settling: false,
    };
    let id = (Arc::<str>::from("quota"), bucket.clone());
    portions.state().by_bucket.insert(id, (claimed, 0));
    assert_eq!(portions.portion("quota", &bucket, &rate, 1.0), 0.5);
}
