# syntax=docker/dockerfile:1
# Base images are pinned by digest, so a rebuild uses the bytes that were reviewed; the tag says
# which release a digest is. See docker/README.md to check or move them (`--build-arg`).
ARG BUILD_IMAGE=rust:1.95-bookworm@sha256:6258907abe69656e41cd992e0b705cdcfabcbbe3db374f92ed2d47121282d4a1
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot@sha256:9dac0a79194e45a7da0158a9c6da57b217585af0786db3845d1f0ec1a0dd182f
# Image of the vramfit operator (reconciles InferenceJobs into planned GPU pods).
# Build from the repository root (see docker/README.md):
#   docker build -f docker/operator.Dockerfile -t ghcr.io/vramfit/vramfit-operator:0.1.0 .

# --- build: the release binary, against glibc (Debian 12, as the runtime image) ---
FROM ${BUILD_IMAGE} AS build
WORKDIR /src
# Only what the build reads: the workspace manifest and lock, and the workspace's crates (Cargo
# needs every member's manifest). No charts, docs, examples, Python or scripts.
COPY Cargo.toml Cargo.lock ./
COPY crds crds
COPY models models
COPY hub hub
COPY cache cache
COPY cache-agent cache-agent
COPY planner planner
COPY runtime runtime
COPY agent agent
COPY operator operator
COPY cli cli
COPY e2e e2e
COPY install-tests install-tests
# The caches keep the crates.io downloads and the build between image builds; the binary
# is copied out of the cached target folder, which is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p vramfit-operator \
 && install -D -m 0755 target/release/vramfit-operator /out/vramfit-operator

# --- runtime: distroless glibc (libc, libgcc, CA certificates), no shell, non-root ---
FROM ${RUNTIME_IMAGE}
COPY --from=build /out/vramfit-operator /vramfit-operator
# distroless "nonroot": UID/GID 65532, the same fixed UID the chart runs with.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/vramfit-operator"]
