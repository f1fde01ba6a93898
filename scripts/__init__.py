"""Developer tooling: the local stack (`make run`), generators (`make generate`) and the
process helpers that the local stack, the tests and the benchmarks share."""
