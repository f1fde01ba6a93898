"""Builders and stand-ins that the tests and the benchmarks both use: scheduler request bodies,
a synthetic fleet's series, fake PromQL and Kubernetes API servers, reference models.

Not a test module and not shipped (the wheel leaves it out): ``bench/`` imports it so that no
benchmark imports ``tests/``, and a test refactor cannot break a benchmark. It imports any part
of MCO but neither ``tests`` nor ``bench`` (tests/test_layering.py).
"""
