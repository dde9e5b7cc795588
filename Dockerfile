# cdcfusion in a container: the same release build as `cargo build --release`, on Debian 12.
# Not built by the test suite (it needs a Docker engine); see docs/operations.md.
#
#   docker build -t cdcfusion .
#   docker run -p 127.0.0.1:5433:5433 -e CDCFUSION_USER=admin -e CDCFUSION_PASSWORD=... cdcfusion

FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin cdcfusion \
    && cp target/release/cdcfusion /usr/local/bin/cdcfusion

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --home-dir /var/lib/cdcfusion --create-home --shell /usr/sbin/nologin cdcfusion
COPY --from=build /usr/local/bin/cdcfusion /usr/bin/cdcfusion
COPY packaging/cdcfusion.toml /etc/cdcfusion/cdcfusion.toml
# The settings file's addresses are for a host; in a container the ports are published instead.
ENV CDCFUSION_LISTEN=0.0.0.0:5433 \
    CDCFUSION_METRICS_LISTEN=0.0.0.0:9433 \
    CDCFUSION_STATE_DIR=/var/lib/cdcfusion
USER cdcfusion
VOLUME /var/lib/cdcfusion
EXPOSE 5433 9433
ENTRYPOINT ["/usr/bin/cdcfusion"]
CMD ["serve", "--config", "/etc/cdcfusion/cdcfusion.toml"]
