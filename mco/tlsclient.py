"""The TLS context of an MCO client: the flags every client offers (a CA file, a client
certificate, no verification) mean the same wherever they are given."""

from __future__ import annotations

import ssl


def client_context(
    *,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    insecure_skip_verify: bool = False,
) -> ssl.SSLContext:
    """TLS 1.2 or newer, verified against ``ca_file`` (else the system's CAs) unless
    ``insecure_skip_verify``, presenting ``cert_file``/``key_file`` when given."""
    ctx = ssl.create_default_context(cafile=ca_file)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file:
        ctx.load_cert_chain(cert_file, key_file)
    if insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx
