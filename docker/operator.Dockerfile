# syntax=docker/dockerfile:1
# Image of the vramfit operator (reconciles InferenceJobs into planned GPU pods).
# Build from the repository root (see docker/README.md):
#   docker build -f docker/operator.Dockerfile -t ghcr.io/vramfit/vramfit-operator:0.1.0 .

# --- build: the release binary, against glibc (Debian 12, as the runtime image) ---
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The caches keep the crates.io downloads and the build between image builds; the binary
# is copied out of the cached target folder, which is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p vramfit-operator \
 && install -D -m 0755 target/release/vramfit-operator /out/vramfit-operator

# --- runtime: distroless glibc (libc, libgcc, CA certificates), no shell, non-root ---
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/vramfit-operator /vramfit-operator
# distroless "nonroot": UID/GID 65532, the same fixed UID the chart runs with.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/vramfit-operator"]
