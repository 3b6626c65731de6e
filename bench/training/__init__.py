"""Benchmarks that need the train extra (torch)."""
