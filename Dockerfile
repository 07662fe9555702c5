# sluice container image: built in a Rust image, run on a distroless base (glibc, CA
# certificates, no shell) as the non-root user 65532.
#
#   docker build -t <registry>/sluice:0.1.0 .
#   docker run --rm -p 8081:8081 -p 8080:8080 <registry>/sluice:0.1.0
#
# Two ways to start it:
# - `sluice serve …` (the entrypoint; the default command serves the example rules kept in
#   /etc/sluice/rules; the Helm chart passes its own flags and mounts its ConfigMap there);
# - `/bin/ratelimit` (a link to sluice): envoyproxy/ratelimit's drop-in, configured only by
#   upstream's environment variables, as Istio's sample, Envoy Gateway and most manifests start
#   `/bin/ratelimit`. It reads rules from RUNTIME_ROOT… and never the example rules: no
#   SLUICE_CONFIG is set here, since a SLUICE_* variable would win over upstream's.
#
# Base images are pinned by digest (the tag beside it is for people), as build arguments so a
# release can move them: `--build-arg RUST_IMAGE=rust:1-bookworm@sha256:<digest>`, with the
# digest looked up when you release (`docker buildx imagetools inspect <image>`). This project's
# build machines cannot reach the image registries: the digests below are the ones published for
# these tags, cross-checked against several public projects that pin the same tags, not pulled here.
ARG RUST_IMAGE=rust:1-bookworm@sha256:93ce27a88655056a51dbdd8f5f2d7ddc071c7b0070fb288a37b5a285fc83971e
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Dependencies first, in a layer of their own: a dummy crate with the real manifest, lock file,
# build script and protos, so a change to sluice's sources does not rebuild every dependency.
COPY Cargo.toml Cargo.lock build.rs ./
COPY proto ./proto
RUN mkdir -p src benches \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && for bench in embedded_store decide matching limiter; do echo 'fn main() {}' > "benches/$bench.rs"; done \
    && cargo build --profile dist --locked --bin sluice \
    && rm -rf src benches
# Then sluice itself (touch: the dummy's build must not look newer than the real sources). The
# `dist` profile (Cargo.toml) is `release` with fat LTO in one codegen unit: a longer build for
# fewer cycles a call.
COPY . .
RUN touch src/main.rs src/lib.rs \
    && cargo build --profile dist --locked --bin sluice \
    && install -D -m 0755 target/dist/sluice /out/usr/local/bin/sluice \
    && install -d /out/bin \
    && ln -s /usr/local/bin/sluice /out/bin/ratelimit \
    && install -D -m 0644 -t /out/etc/sluice/rules config/*.yaml \
    && install -d /out/var/lib/sluice/data

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/usr/local/bin/sluice /usr/local/bin/sluice
# A directory copy keeps the link: /bin/ratelimit → /usr/local/bin/sluice.
COPY --from=build /out/bin/ /bin/
COPY --from=build /out/etc/sluice/rules /etc/sluice/rules
# The working directory (and its data/) is the one place `sluice serve` may write; the
# `ratelimit` personality (Redis) writes nothing, so a read-only root filesystem works.
COPY --from=build --chown=65532:65532 /out/var/lib/sluice /var/lib/sluice
USER 65532:65532
WORKDIR /var/lib/sluice
# gRPC, HTTP, and the Prometheus port upstream deployments use (PROMETHEUS_ADDR=:19001).
EXPOSE 8081 8080 19001
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve", "--config", "/etc/sluice/rules"]
