"""Registered benchmarks: every module here is imported by ``megamoe.bench.load_benchmarks``."""
