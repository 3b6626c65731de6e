"""Traces, structured logs and drift series of the server (docs/observability.md).

Each module stands alone and imports neither a transport nor the engine: the call layer,
the engine and the server call into them.
"""
