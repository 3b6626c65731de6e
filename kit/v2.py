"""V2 `ModelInfer` requests with a TEXT input, as a client library builds them: the texts as one
raw little-endian BYTES tensor of shape [N, 1]."""

from __future__ import annotations

from collections.abc import Sequence

from attnserve.service.api.v2.tensors import encode_bytes
from attnserve.service.proto.inference import grpc_service_pb2 as pb

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def text_request(
    model: str, texts: Sequence[str], *, request_id: str = "", outputs: Sequence[str] = (), version: str = ""
) -> pb.ModelInferRequest:
    """The request for `texts`, asking for `outputs` (none: every output the model declares)."""
    request = pb.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts), 1])
    request.raw_input_contents.append(encode_bytes([text.encode() for text in texts]))
    for name in outputs:
        request.outputs.add(name=name)
    return request
