"""What the server and its client both use: the words of the protocol's values and the
arithmetic a reply's attention takes. Imports nothing of either side (tests/test_imports.py)."""
