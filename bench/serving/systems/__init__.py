"""The servers measured beside attnserve: a hand-written naive server, the gRPC floor, MLServer
and PyTriton (the last two in environments of their own, made by the scripts beside them)."""
