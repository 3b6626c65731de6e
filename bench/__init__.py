"""attnserve's benchmarks: `python -m bench` (see bench/cli.py)."""
