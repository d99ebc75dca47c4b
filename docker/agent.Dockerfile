# syntax=docker/dockerfile:1
# Image of the vramfit node agent (reads GPUs through NVML, labels its Node).
# Build from the repository root (see docker/README.md):
#   docker build -f docker/agent.Dockerfile -t ghcr.io/vramfit/vramfit-agent:0.1.0 .

# --- build: the release binary, against glibc (Debian 12, as the runtime image) ---
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# The caches keep the crates.io downloads and the build between image builds; the binary
# is copied out of the cached target folder, which is not part of the layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p vramfit-agent \
 && install -D -m 0755 target/release/vramfit-agent /out/vramfit-agent

# --- runtime: distroless glibc (libc, libgcc, CA certificates), no shell, non-root ---
# glibc matters: the agent dlopen()s the driver's libnvidia-ml.so.1, which the NVIDIA
# container runtime mounts into the container (no CUDA or NVML library in the image).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/vramfit-agent /vramfit-agent
# distroless "nonroot": UID/GID 65532, the same fixed UID the chart runs with.
USER 65532:65532
EXPOSE 9102
ENTRYPOINT ["/vramfit-agent"]
