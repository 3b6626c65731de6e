"""Drive a running attnserve with NVIDIA's own `tritonclient` and report what it saw as JSON.

Runs under the tools environment's Python (.venv-tools: tritonclient, protobuf < 7), never
in the test process: tritonclient's generated modules declare the `inference` proto
package in other files than attnserve's, which one descriptor pool refuses. Nothing here
imports attnserve. Input on stdin:

    {"target": "127.0.0.1:PORT", "model": "car", "texts": [...],
     "input_ids": [[...]], "attention_mask": [[...]]}

Output on stdout: one JSON object (see `main`); the tests compare it with the native API.
"""

from __future__ import annotations

import json
import queue
import sys
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

OUTPUTS = ("LOGITS", "PROBABILITIES", "LABEL", "ATTENTION", "LENGTHS")


def text_input(texts: list[str]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=object))
    return tensor


def ids_inputs(ids: list[list[int]], mask: list[list[int]]) -> list[grpcclient.InferInput]:
    tensors = []
    for name, rows in (("INPUT_IDS", ids), ("ATTENTION_MASK", mask)):
        array = np.asarray(rows, dtype=np.int64)
        tensor = grpcclient.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def as_json(result: grpcclient.InferResult) -> dict[str, Any]:
    response = result.get_response()
    outputs: dict[str, Any] = {}
    for output in response.outputs:
        array = result.as_numpy(output.name)
        if array.dtype == object:
            outputs[output.name] = [[item.decode() for item in row] for row in array.tolist()]
        else:
            outputs[output.name] = array.tolist()
    return {"id": response.id, "model_version": response.model_version, "outputs": outputs}


def error_of(call: Any) -> dict[str, str]:
    try:
        call()
    except InferenceServerException as exc:
        return {"status": str(exc.status()), "message": exc.message()}
    return {"status": "OK", "message": ""}


def main() -> None:
    spec = json.load(sys.stdin)
    model, texts = spec["model"], spec["texts"]
    client = grpcclient.InferenceServerClient(spec["target"])
    report: dict[str, Any] = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready(model),
        "unknown_model_ready": client.is_model_ready("no-such-model"),
        "server_metadata": client.get_server_metadata(as_json=True),
        "metadata": {name: client.get_model_metadata(name, as_json=True) for name in spec["all_models"]},
        "config": client.get_model_config(model, as_json=True),
        "repository_index": client.get_model_repository_index(as_json=True),
        "stats_before": client.get_inference_statistics(model, as_json=True),
    }

    report["infer_text"] = as_json(client.infer(model, [text_input(texts)], request_id="text-1"))
    report["infer_ids"] = as_json(
        client.infer(model, ids_inputs(spec["input_ids"], spec["attention_mask"]), request_id="ids-1")
    )
    only = [grpcclient.InferRequestedOutput("LABEL"), grpcclient.InferRequestedOutput("LENGTHS")]
    report["infer_some_outputs"] = as_json(client.infer(model, [text_input(texts)], outputs=only))

    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.async_infer(
        model, [text_input(texts)], lambda result, error: done.put((result, error)), request_id="async-1"
    )
    result, error = done.get(timeout=30)
    report["async_infer"] = {"error": str(error) if error else None, **(as_json(result) if result else {})}

    streamed: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: streamed.put((result, error)))
    for index, text in enumerate(texts):
        client.async_stream_infer(model, [text_input([text])], request_id=f"stream-{index}")
    client.async_stream_infer("no-such-model", [text_input(texts[:1])], request_id="stream-bad")
    stream_results: dict[str, Any] = {}
    stream_errors: list[str] = []
    for _ in range(len(texts) + 1):
        result, error = streamed.get(timeout=30)
        if error is not None:
            stream_errors.append(str(error))
        else:
            item = as_json(result)
            stream_results[item["id"]] = item
    client.stop_stream()
    report["stream"] = {"results": stream_results, "errors": stream_errors}

    report["errors"] = {
        "unknown_model": error_of(lambda: client.infer("no-such-model", [text_input(texts)])),
        "unknown_output": error_of(
            lambda: client.infer(
                model, [text_input(texts)], outputs=[grpcclient.InferRequestedOutput("NOPE")]
            )
        ),
        "unimplemented": error_of(lambda: client.load_model(model)),
    }
    report["stats_after"] = client.get_inference_statistics(model, as_json=True)
    report["stats_all"] = client.get_inference_statistics(as_json=True)
    client.close()
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()
