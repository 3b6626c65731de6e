"""Ask a running attnserve for attributions with NVIDIA's `tritonclient` (gRPC and HTTP) and
report what it saw as JSON. Runs under the tools environment's Python (.venv-tools); imports
nothing of attnserve. Input on stdin:

    {"target": "127.0.0.1:GRPC_PORT", "url": "127.0.0.1:HTTP_PORT", "model": "car-order",
     "texts": [...]}

Output on stdout, per transport ("grpc", "http"): "metadata" (output name -> [datatype,
shape]), "config" (output name -> data_type), "named" (ATTRIBUTION and ATTRIBUTION_ROWS asked
as outputs, parameter attribution=occlusion), "unasked" (the same without the parameter),
"shapley" (no outputs named, parameters attribution=shapley and attribution_budget=16: every
output), "plain" (no outputs named, no attribution) and "bad_method" (the error of
attribution=nope).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def outputs_of(result: Any, names: list[str]) -> dict[str, Any]:
    return {name: result.as_numpy(name).tolist() for name in names if result.as_numpy(name) is not None}


def report_of(module: Any, client: Any, model: str, texts: list[str], *, grpc: bool) -> dict[str, Any]:
    def text_input() -> Any:
        tensor = module.InferInput("TEXT", [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object))
        return tensor

    names = ["PROBABILITIES", "ATTRIBUTION", "ATTRIBUTION_ROWS"]
    metadata = client.get_model_metadata(model, as_json=True) if grpc else client.get_model_metadata(model)
    config = client.get_model_config(model, as_json=True) if grpc else client.get_model_config(model)
    config = config.get("config", config)
    report: dict[str, Any] = {
        "metadata": {t["name"]: [t["datatype"], [int(d) for d in t["shape"]]] for t in metadata["outputs"]},
        "config": {o["name"]: o["data_type"] for o in config["output"]},
    }
    named = [module.InferRequestedOutput(name) for name in ("ATTRIBUTION", "ATTRIBUTION_ROWS")]
    occlusion = client.infer(model, [text_input()], outputs=named, parameters={"attribution": "occlusion"})
    report["named"] = outputs_of(occlusion, names)
    report["unasked"] = outputs_of(client.infer(model, [text_input()], outputs=named), names)
    shapley = client.infer(
        model, [text_input()], parameters={"attribution": "shapley", "attribution_budget": 16}
    )
    response = shapley.get_response(as_json=True) if grpc else shapley.get_response()
    report["shapley"] = {
        "names": [o["name"] for o in response["outputs"]],
        **outputs_of(shapley, names),
    }
    plain = client.infer(model, [text_input()])
    response = plain.get_response(as_json=True) if grpc else plain.get_response()
    report["plain"] = {"names": [o["name"] for o in response["outputs"]]}
    try:
        client.infer(model, [text_input()], outputs=named, parameters={"attribution": "nope"})
        report["bad_method"] = {"status": "OK", "message": ""}
    except InferenceServerException as exc:
        report["bad_method"] = {"status": str(exc.status()), "message": exc.message()}
    return report


def main() -> None:
    spec = json.load(sys.stdin)
    model, texts = spec["model"], spec["texts"]
    grpc_client = grpcclient.InferenceServerClient(spec["target"])
    http_client = httpclient.InferenceServerClient(spec["url"])
    report = {
        "grpc": report_of(grpcclient, grpc_client, model, texts, grpc=True),
        "http": report_of(httpclient, http_client, model, texts, grpc=False),
    }
    grpc_client.close()
    http_client.close()
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
