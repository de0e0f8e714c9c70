"""Benchmarks: timing tables, the machine description, the reference oracles."""
