"""mco-extender: the Volcano and kube-scheduler extender (DESIGN §5)."""

__version__ = "0.1.0"
