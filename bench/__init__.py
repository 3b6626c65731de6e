"""attnserve's benchmarks: `python -m bench` (bench/cli.py; sections listed in bench/sections.py)."""
