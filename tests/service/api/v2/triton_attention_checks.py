"""Ask a running attnserve for each attention mode with NVIDIA's `tritonclient` and report the
replies as JSON.

Runs under the tools environment's Python (.venv-tools), like triton_client_checks.py.
tritonclient's `InferRequestedOutput` sets no parameters of its own, so the mode goes in the
request's `parameters`. Input on stdin:

    {"target": "127.0.0.1:PORT", "model": "bert", "texts": [...], "modes": ["pooled", ...]}

Output on stdout: {"default": REPLY, "modes": {mode: REPLY}, "unknown_mode": ERROR}, a REPLY
being {"ATTENTION": nested list, "shape": [...], "LENGTHS": [...]}.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

OUTPUTS = ("ATTENTION", "LENGTHS")


def main() -> None:
    spec = json.load(sys.stdin)
    model = spec["model"]
    client = grpcclient.InferenceServerClient(spec["target"])
    text = grpcclient.InferInput("TEXT", [len(spec["texts"]), 1], "BYTES")
    text.set_data_from_numpy(np.array([[t.encode()] for t in spec["texts"]], dtype=object))
    outputs = [grpcclient.InferRequestedOutput(name) for name in OUTPUTS]

    def infer(parameters: dict[str, Any] | None) -> dict[str, Any]:
        result = client.infer(model, [text], outputs=outputs, parameters=parameters)
        attention = result.as_numpy("ATTENTION")
        return {
            "ATTENTION": attention.tolist(),
            "shape": list(attention.shape),
            "LENGTHS": result.as_numpy("LENGTHS").tolist(),
        }

    report: dict[str, Any] = {
        "default": infer(None),
        "modes": {mode: infer({"attention_mode": mode}) for mode in spec["modes"]},
    }
    try:
        infer({"attention_mode": "every_head"})
    except InferenceServerException as exc:
        report["unknown_mode"] = {"status": str(exc.status()), "message": exc.message()}
    else:
        report["unknown_mode"] = {"status": "OK", "message": ""}
    client.close()
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
