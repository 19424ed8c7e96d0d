"""The published side-by-side report: ``python -m benchmarks.report`` (``make bench``)."""
