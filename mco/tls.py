"""Server-side TLS, the same flags and behaviour on every MCO server."""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TLSConfig:
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None

    def validate(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("TLS needs both a certificate and a key file")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("client certificate authentication needs TLS (a cert and a key)")

    def server_context(self) -> ssl.SSLContext:
        """TLS 1.2+; with a client CA, clients must present a certificate it signed."""
        self.validate()
        assert self.cert_file is not None
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            ctx.load_verify_locations(cafile=self.client_ca_file)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


def add_tls_flags(parser: argparse.ArgumentParser, prefix: str = "--web.") -> None:
    """``--web.tls-cert-file`` style flags (or another prefix, e.g. ``--tls-``)."""
    parser.add_argument(f"{prefix}tls-cert-file", dest="tls_cert_file", metavar="FILE")
    parser.add_argument(f"{prefix}tls-key-file", dest="tls_key_file", metavar="FILE")
    parser.add_argument(
        f"{prefix}tls-client-ca-file",
        dest="tls_client_ca_file",
        metavar="FILE",
        help="require client certificates signed by this CA",
    )


def tls_from_args(args: argparse.Namespace) -> TLSConfig:
    return TLSConfig(args.tls_cert_file, args.tls_key_file, args.tls_client_ca_file)
