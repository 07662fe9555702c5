//! Compiles the vendored RLS v3 schema in `proto/` with protox (no system protoc needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = "proto/envoy/service/ratelimit/v3/rls.proto";
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile([root], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
