"""Benchmarks; the recall ones import each other, so this is a package."""
