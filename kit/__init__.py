"""What drives a server from outside, shared by bench/, loadtest/ and tests/: ports, launching,
V2 requests, the call ledger and its percentiles, the load generator and the result type."""
