"""Benchmarks that need the train extra (torch): training speed and memory, data parallelism,
ensembles of runs, and the ONNX exporters."""
