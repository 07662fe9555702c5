//! envoyproxy/ratelimit compatibility: the `ratelimit` personality deployed as users deploy
//! envoyproxy/ratelimit, and envoyproxy/ratelimit's own test expectations replayed against it.

#[path = "../common/mod.rs"]
mod common;

mod ratelimit_binary;
mod replay;
mod token_quota;
