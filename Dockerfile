# A ringlimitd image on Debian bookworm (multi-stage: build with scripts/bootstrap's packages, run on a slim
# image with only the runtime libraries the Debian package depends on).
#   docker build -t ringlimit .
#   docker compose up          # 3 nodes, see compose.yaml
FROM debian:bookworm AS build
WORKDIR /src
COPY . .
RUN scripts/bootstrap && scripts/build --target ringlimitd ringlimit \
 && cd build/release && cpack -G DEB -B /out >/dev/null

FROM debian:bookworm-slim
COPY --from=build /out/ringlimit_*.deb /tmp/
RUN apt-get update -q && apt-get install -y -q --no-install-recommends /tmp/ringlimit_*.deb curl \
 && rm -rf /var/lib/apt/lists/* /tmp/ringlimit_*.deb \
 && useradd --system --uid 10001 --home /var/lib/ringlimit --create-home ringlimit
USER ringlimit
# Inside a container the node listens on every interface; it announces the address given in
# RINGLIMIT_ADVERTISE_PEER (compose.yaml: the service name) and needs the secrets
# (RINGLIMIT_ADMIN_TOKEN, RINGLIMIT_CLUSTER_SECRET), or RINGLIMIT_INSECURE=1 for a local trial.
ENV RINGLIMIT_LISTEN=0.0.0.0:7001 RINGLIMIT_PEER_LISTEN=0.0.0.0:7101 RINGLIMIT_GRPC_LISTEN=0.0.0.0:7201 \
    RINGLIMIT_DATA_DIR=/var/lib/ringlimit/data
EXPOSE 7001 7101 7201
HEALTHCHECK --interval=5s --timeout=2s CMD curl -sf http://127.0.0.1:7001/healthz || exit 1
ENTRYPOINT ["/usr/bin/ringlimitd"]
