"""Workloads the benchmarks train (not built-ins users see)."""
