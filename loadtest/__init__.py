"""attnserve's gRPC load test (Locust): `python -m loadtest --target HOST:PORT --duration 30s`."""
