"""Benchmarks: run from the repository root as ``python -m benchmarks.<name>`` (``make bench``
runs all of them); see docs/benchmarks.md."""
