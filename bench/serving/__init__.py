"""Serving benchmarks: the suite (`python -m bench`) and the peers, inprocess and http sections.

Every import of attnserve's service internals (the server, settings, engine types) is in
inprocess.py; the other modules use only the bundle reader, the generated protos and the
client, which stay stable while the service's insides change.
"""
