"""The HTTP port: KServe V2 REST, the JSON classify API and the attention explorer (docs/http.md)."""
