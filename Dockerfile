# syntax=docker/dockerfile:1
# The one MCO image the Helm chart runs: mco-exporter, mco-rulegen, mco-reporter, mco-extender
# (and kubectl-mco, the kubectl plugin, for a debugging pod).
#
#   docker build -t ghcr.io/mco-io/mco:0.1.0 .        # where a registry serves debian:bookworm-slim
#   make image                                         # here: base built with mmdebstrap (docs/helm.md)
#
# Debian bookworm: its python3 is 3.11, the version MCO targets, and its python3-bpfcc (bcc 0.26)
# is built for that interpreter. The exporter's eBPF collector imports bcc from
# /usr/lib/python3/dist-packages (--collector.biolatency.bcc-path), so the virtualenv below uses
# the same /usr/bin/python3 and needs no access to the system site-packages otherwise.
# Kernel headers are not in the image: the DaemonSet mounts the host's /lib/modules and /usr/src
# (exporter.kernelEvents, docs/helm.md).
#
# BASE_IMAGE: any Debian bookworm image. `make image` passes one it built from Debian packages
# with python3, python3-venv and python3-bpfcc already installed; then no apt lists are fetched.
# PIP_CONSTRAINTS: space-separated `name==version` pins (`make image` passes the versions the
# tests ran with); empty: pip resolves pyproject.toml's ranges.
# Secret `pip-ca` (optional): a CA bundle for pip (`make image` passes the host's, for a TLS
# proxy between the build and PyPI); a secret, so no layer keeps it.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN dpkg -s python3 python3-venv >/dev/null 2>&1 \
 || (apt-get update \
     && apt-get install -y --no-install-recommends python3 python3-venv \
     && apt-get clean && rm -rf /var/lib/apt/lists/*)
ARG PIP_CONSTRAINTS=""
# Dependencies first: this layer is reused while the pins stay the same.
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && python3 -m venv /opt/mco \
 && printf '%s\n' ${PIP_CONSTRAINTS} >/opt/constraints.txt \
 && if [ -n "${PIP_CONSTRAINTS}" ]; then \
      /opt/mco/bin/pip install --no-cache-dir --disable-pip-version-check \
        -r /opt/constraints.txt; \
    fi
WORKDIR /src
COPY pyproject.toml README.md ./
COPY mco ./mco
COPY exporter ./exporter
COPY rulegen ./rulegen
COPY reporter ./reporter
COPY extender ./extender
COPY kubectl_mco ./kubectl_mco
RUN --mount=type=secret,id=pip-ca \
    if [ -f /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && /opt/mco/bin/pip install --no-cache-dir --disable-pip-version-check \
      -c /opt/constraints.txt . \
 && /opt/mco/bin/mco-exporter --version \
 && /opt/mco/bin/mco-rulegen --help >/dev/null \
 && /opt/mco/bin/mco-reporter --help >/dev/null \
 && /opt/mco/bin/mco-extender --version

FROM ${BASE_IMAGE}
RUN dpkg -s python3 python3-bpfcc >/dev/null 2>&1 \
 || (apt-get update \
     && apt-get install -y --no-install-recommends python3 python3-bpfcc \
     && apt-get clean && rm -rf /var/lib/apt/lists/*)
# A name for UID 65532 (as distroless has), so tools that look the user up find one.
RUN groupadd -K GID_MAX=65535 --gid 65532 nonroot \
 && useradd -K UID_MAX=65535 --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin nonroot
COPY --from=build /opt/mco /opt/mco
# Bytecode was compiled at install time; nothing is written at run time, so the root file
# system can be read-only (the chart mounts an emptyDir at /tmp only).
ENV PATH=/opt/mco/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
LABEL org.opencontainers.image.title="mco" \
      org.opencontainers.image.source="https://github.com/mco-io/mco" \
      org.opencontainers.image.licenses="Apache-2.0"
# Non-root by default; the exporter's DaemonSet runs it as root with a few capabilities only
# with exporter.kernelEvents.enabled.
USER 65532:65532
WORKDIR /tmp
EXPOSE 9847 9848 9849 9850
ENTRYPOINT []
CMD ["mco-exporter", "--help"]
