# syntax=docker/dockerfile:1
# The one MCO image the Helm chart runs: mco-exporter, mco-rulegen, mco-reporter, mco-extender.
#
#   docker build -t ghcr.io/mco-io/mco:0.1.0 .
#
# Debian bookworm: its python3 is 3.11, the version MCO targets, and its python3-bpfcc (bcc 0.26)
# is built for that interpreter. The exporter's eBPF collector imports bcc from
# /usr/lib/python3/dist-packages (--collector.biolatency.bcc-path), so the virtualenv below uses
# the same /usr/bin/python3 and needs no access to the system site-packages otherwise.
# Kernel headers are not in the image: the DaemonSet mounts the host's /lib/modules and /usr/src.

FROM debian:bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mco ./mco
COPY exporter ./exporter
COPY rulegen ./rulegen
COPY reporter ./reporter
COPY extender ./extender
RUN python3 -m venv /opt/mco \
 && /opt/mco/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/mco/bin/pip install --no-cache-dir . \
 && /opt/mco/bin/mco-exporter --version \
 && /opt/mco/bin/mco-extender --version

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-bpfcc \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/mco /opt/mco
ENV PATH=/opt/mco/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
# Non-root by default; the exporter's DaemonSet runs it as root with a few capabilities.
USER 65532:65532
EXPOSE 9847 9848 9849 9850
ENTRYPOINT []
CMD ["mco-exporter", "--help"]
