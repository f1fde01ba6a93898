"""Conventions every MCO process shares: structured logs and TLS for its servers.

Deliberately tiny. Component logic lives in ``exporter``, ``rulegen``, ``reporter`` and
``extender``; only process-level plumbing that all four console scripts must do the same way
belongs here.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mco")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"
