# sluice container image: built in a Rust image, run on a distroless base (glibc, CA
# certificates, no shell) as the non-root user 65532. Used by the Helm chart (image.repository).
#
#   docker build -t <registry>/sluice:0.1.0 .
#   docker run --rm -p 8081:8081 -p 8080:8080 <registry>/sluice:0.1.0
#
# The image reads its rules from /etc/sluice/rules (the repository's config/ by default; the
# chart mounts a ConfigMap there).

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin sluice \
    && install -D -m 0755 target/release/sluice /out/usr/local/bin/sluice \
    && install -D -m 0644 -t /out/etc/sluice/rules config/*.yaml \
    && install -d /out/var/lib/sluice/data

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/usr/local/bin/sluice /usr/local/bin/sluice
COPY --from=build /out/etc/sluice/rules /etc/sluice/rules
# The working directory (and its data/) is the one place the server may write.
COPY --from=build --chown=65532:65532 /out/var/lib/sluice /var/lib/sluice
USER 65532:65532
WORKDIR /var/lib/sluice
ENV SLUICE_CONFIG=/etc/sluice/rules
EXPOSE 8081 8080
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve"]
