//! The transport ceiling: an RLS v3 server that answers OK without any work, on the same tonic
//! stack, runtime and listener setup as `sluice serve`. `sluice bench` against it measures what
//! gRPC alone costs; `scripts/bench` compares sluice with it.
//!
//! Run: `cargo run --release --example baseline -- --grpc-addr 127.0.0.1:8091`
//! (prints `baseline ready grpc=<addr>` once it listens).

use std::net::SocketAddr;

use sluice::proto::rate_limit_response::Code;
use sluice::proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use sluice::proto::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

// The same allocator as the `sluice` binary, so the comparison is of the work, not of malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers every call OK, with no status, no matching and no counting.
struct Baseline;

#[tonic::async_trait]
impl RateLimitService for Baseline {
    async fn should_rate_limit(
        &self,
        _request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            ..RateLimitResponse::default()
        }))
    }
}

fn grpc_addr() -> Result<SocketAddr, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(SocketAddr::from(([127, 0, 0, 1], 8091))),
        [flag, addr] if flag == "--grpc-addr" => addr
            .parse()
            .map_err(|e| format!("invalid --grpc-addr '{addr}': {e}")),
        _ => Err("usage: baseline [--grpc-addr ADDR]".into()),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = TcpListener::bind(grpc_addr()?).await?;
    println!("baseline ready grpc={}", listener.local_addr()?);
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Baseline))
        .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true)))
        .await?;
    Ok(())
}
