"""Drive a running attnserve's HTTP port with NVIDIA's `tritonclient.http` and report what it
saw as JSON. Runs under the tools environment's Python (.venv-tools); imports nothing of
attnserve. Input on stdin: {"url": "127.0.0.1:PORT", "model": "car", "texts": [...],
"input_ids": [[...]], "attention_mask": [[...]]}. Output on stdout: one JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException


def text_input(texts: list[str], binary: bool) -> httpclient.InferInput:
    tensor = httpclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object), binary_data=binary)
    return tensor


def ids_inputs(ids: list[list[int]], mask: list[list[int]]) -> list[httpclient.InferInput]:
    tensors = []
    for name, rows in (("INPUT_IDS", ids), ("ATTENTION_MASK", mask)):
        array = np.asarray(rows, dtype=np.int64)
        tensor = httpclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def as_json(result: httpclient.InferResult) -> dict[str, Any]:
    response = result.get_response()
    outputs: dict[str, Any] = {}
    for output in response["outputs"]:
        array = result.as_numpy(output["name"])
        if array.dtype == object:
            outputs[output["name"]] = [
                [item.decode() if isinstance(item, bytes) else item for item in row] for row in array.tolist()
            ]
        else:
            outputs[output["name"]] = array.tolist()
    return {"id": response.get("id", ""), "model_version": response["model_version"], "outputs": outputs}


def error_of(call: Any) -> dict[str, str]:
    try:
        call()
    except InferenceServerException as exc:
        return {"status": str(exc.status()), "message": str(exc.message())}
    return {"status": "OK", "message": ""}


def main() -> None:
    spec = json.load(sys.stdin)
    model, texts = spec["model"], spec["texts"]
    client = httpclient.InferenceServerClient(spec["url"], concurrency=2)
    report: dict[str, Any] = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready(model),
        "unknown_model_ready": client.is_model_ready("no-such-model"),
        "server_metadata": client.get_server_metadata(),
        "metadata": client.get_model_metadata(model),
        "config": client.get_model_config(model),
        "repository_index": client.get_model_repository_index(),
        "stats_before": client.get_inference_statistics(model),
    }
    report["infer_binary"] = as_json(client.infer(model, [text_input(texts, True)], request_id="bin-1"))
    report["infer_json"] = as_json(
        client.infer(
            model,
            [text_input(texts, False)],
            outputs=[
                httpclient.InferRequestedOutput(name, binary_data=False) for name in ("LABEL", "LOGITS")
            ],
            request_id="json-1",
        )
    )
    report["infer_ids"] = as_json(client.infer(model, ids_inputs(spec["input_ids"], spec["attention_mask"])))
    report["infer_gzip"] = as_json(
        client.infer(model, [text_input(texts, True)], request_compression_algorithm="gzip")
    )
    pending = client.async_infer(model, [text_input(texts, True)], request_id="async-1")
    report["async_infer"] = as_json(pending.get_result(timeout=30))
    report["errors"] = {
        "unknown_model": error_of(lambda: client.infer("no-such-model", [text_input(texts, True)])),
        "unknown_output": error_of(
            lambda: client.infer(
                model, [text_input(texts, True)], outputs=[httpclient.InferRequestedOutput("NOPE")]
            )
        ),
        "load": error_of(lambda: client.load_model(model)),
    }
    report["stats_after"] = client.get_inference_statistics(model)
    client.close()
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
