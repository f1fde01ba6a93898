"""Conventions every MCO process shares: structured logs and TLS for its servers, and the
clients more than one part uses (the Kubernetes watch, the PromQL client).

Deliberately tiny. Component logic lives in ``exporter``, ``rulegen``, ``reporter`` and
``extender``; only plumbing that several parts must do the same way belongs here, and it
imports none of them (tests/test_layering.py).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mco")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"
