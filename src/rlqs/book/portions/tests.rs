//! What a replica claims of a limit.

use super::*;

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
