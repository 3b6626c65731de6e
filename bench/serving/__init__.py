"""Serving benchmarks: the suite (`python -m bench`) and the peers, inprocess and http sections.
Only inprocess.py imports the service's internals; the rest use the bundle reader, the protos
and the client, which stay stable while those change."""
