//! Compiles the vendored schemas in `proto/` with protox (no system protoc needed): the RLS v3
//! service, Envoy's quota service (RLQS), and the xDS discovery service with envoyproxy/ratelimit's rule resource. Generates
//! protojson (serde) impls of the RLS messages for the `/json` endpoint with pbjson. The RLS
//! route sluice serves is generated a second time by hand (`tonic_build::manual`): the same
//! method and path, answering with the limiter's `Decision`, which `crate::service::wire` writes
//! straight to protobuf instead of through the generated response message. Also records what
//! `sluice --version` prints beside the version: the commit and the cargo profile built.

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    build_identity()?;
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
        .output_type("crate::limiter::Decision")
        .codec_path("crate::service::wire::DecisionCodec")
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

/// Sets `SLUICE_COMMIT` (the short commit, or "unknown" outside a git checkout, as a source
/// tarball is) and `SLUICE_PROFILE` (the cargo profile: `debug`, `release`, `dist`...).
fn build_identity() -> Result<(), Box<dyn std::error::Error>> {
    let commit = own_commit()?.unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=SLUICE_COMMIT={commit}");
    // Cargo's PROFILE says only "debug" or "release" (a custom profile such as `dist` reports
    // "release"); the directory cargo builds into is named after the profile itself:
    // <target>/<profile>/build/sluice-<hash>/out.
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let profile = match out.ancestors().nth(3).and_then(Path::file_name) {
        Some(name) => name.to_string_lossy().into_owned(),
        None => std::env::var("PROFILE")?,
    };
    println!("cargo:rustc-env=SLUICE_PROFILE={profile}");
    Ok(())
}

/// The short commit of this package's own git checkout, watched so that a new commit or a
/// checkout rebuilds; `None` without git or outside a checkout.
fn own_commit() -> Result<Option<String>, Box<dyn std::error::Error>> {
    // Only this package's own repository counts: a source tarball unpacked inside some other
    // checkout must not report that checkout's commit.
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).canonicalize()?;
    let own_repository = git(&["rev-parse", "--show-toplevel"])
        .and_then(|top| Path::new(&top).canonicalize().ok())
        .is_some_and(|top| top == manifest_dir);
    if !own_repository {
        return Ok(None);
    }
    // HEAD itself (a checkout), the branch it names (a commit) and the packed refs; only files
    // that exist, since cargo reruns a build script on every build for a missing one.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        if Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Ok(git(&["rev-parse", "--short", "HEAD"]))
}

/// A git command's trimmed output, or `None` when git or the repository is not there.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}
