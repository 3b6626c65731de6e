"""Raw method paths and the statuses a hostile request may end with (bad-input and fuzz suites)."""

from __future__ import annotations

# Every status the server may answer a malformed or hostile request with: never UNKNOWN or INTERNAL.
ALLOWED = {
    "OK",
    "INVALID_ARGUMENT",
    "NOT_FOUND",
    "RESOURCE_EXHAUSTED",
    "UNAUTHENTICATED",
    "PERMISSION_DENIED",
    "DEADLINE_EXCEEDED",
    "UNAVAILABLE",
}
CLASSIFY = "/attnserve.v1.Classifier/Classify"
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
