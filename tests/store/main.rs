//! The stores and the algorithms they run: the embedded store, persistence across restarts,
//! hostile data directories, the store contract (memory and Redis) and the algorithms'
//! properties. One test binary so the library is linked once for all of them.

#[path = "../common/mod.rs"]
mod common;

mod algorithms_prop;
mod data_dir;
mod embedded_store;
mod persistence;
mod store_contract;
