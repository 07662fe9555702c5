//! The stores and the algorithms they run: the embedded store, persistence across restarts,
//! hostile data directories, the store contract (memory and Redis) and the algorithms'
//! properties, recording limits' among them. One test binary so the library is linked once
//! for all of them.

#[path = "../common/mod.rs"]
mod common;

mod algorithms_prop;
mod data_dir;
mod embedded_store;
mod persistence;
mod recording_prop;
mod store_contract;
