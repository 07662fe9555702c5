//! A model of Envoy 1.40's quota client (`envoy_model`), a fleet of them sharing one limit
//! through the real book on a manual clock (`fleet`), and what `sluice simulate --rlqs` runs on
//! it (`simulate`, the one public entry). The bound's property test and the fairness tests run
//! the same fleet.

mod envoy_model;
mod fleet;
pub mod simulate;

#[cfg(test)]
mod bound_tests;
#[cfg(test)]
mod fairness_tests;
