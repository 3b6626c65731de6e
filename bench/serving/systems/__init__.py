"""The servers measured beside attnserve: naive, the gRPC floor, MLServer and PyTriton."""
