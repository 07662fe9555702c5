//! Compiles the vendored schemas in `proto/` with protox (no system protoc needed): the RLS v3
//! service, Envoy's quota service (RLQS), and the xDS discovery service with envoyproxy/ratelimit's rule resource. Generates
//! protojson (serde) impls of the RLS messages for the `/json` endpoint with pbjson. The RLS
//! route sluice serves is generated a second time by hand (`tonic_build::manual`): the same
//! method and path, answering with `crate::service::wire::Answer`, which writes a decision
//! straight to protobuf instead of through the generated response message.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let roots = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/envoy/service/discovery/v3/ads.proto",
        "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
        "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(roots, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_bytes = descriptors.encode_to_vec();
    // Well-known types come from pbjson-types, which carry protojson impls (e.g. "1.5s" durations).
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_well_known_types(true)
        // prost's codec, with undecodable requests answered INVALID_ARGUMENT (src/proto/codec.rs).
        .codec_path("crate::proto::codec::Codec")
        .extern_path(".google.protobuf", "::pbjson_types")
        .compile_fds(descriptors)?;
    let should_rate_limit = tonic_build::manual::Method::builder()
        .name("should_rate_limit")
        .route_name("ShouldRateLimit")
        .input_type("crate::proto::RateLimitRequest")
        .output_type("crate::service::wire::Answer")
        .codec_path("crate::service::wire::AnswerCodec")
        .build();
    tonic_build::manual::Builder::new()
        .build_client(false)
        .build_transport(false)
        .compile(&[tonic_build::manual::Service::builder()
            .name("RateLimitService")
            .package("envoy.service.ratelimit.v3")
            .method(should_rate_limit)
            .build()]);
    pbjson_build::Builder::new()
        .register_descriptors(&descriptor_bytes)?
        .out_dir(&out)
        // Only the RLS messages have a JSON API; xDS is spoken in protobuf only.
        .build(&[
            ".envoy.service.ratelimit",
            ".envoy.extensions",
            ".envoy.type",
            ".envoy.config.core",
        ])?;
    Ok(())
}
