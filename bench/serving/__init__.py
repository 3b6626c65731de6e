"""Serving benchmarks: the suite (`python -m bench`) and the serving sections. Only inprocess.py and
explain.py import the service's internals; the rest use its bundle reader, protos and client."""
