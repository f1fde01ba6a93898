"""mco-exporter: the node agent that exposes host interference signals to Prometheus."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mco")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
