"""The baseline: the gRPC server a user would write by hand around the same bundle.

    python -m bench.serving.systems.naive_server --bundle models/car-order/1 --port 50061

One request, one tokenization, one `session.run`, one reply, on grpc's synchronous server with
a thread pool, speaking attnserve.v1 `Classify`: no batching, bucketing or admission control.
"""

from __future__ import annotations

import argparse
import signal
import sys
from concurrent import futures
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import onnxruntime as ort
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from attnserve.service.bundle import read_bundle
from attnserve.service.bundle.calibration import softmax
from attnserve.service.common.vocabulary import AttentionKind
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as pb
from bench.serving.ceiling import tokenizer_for
from kit.launch import Launched, health_serving, launched
from kit.ports import free_port


class NaiveClassifier:
    def __init__(self, folder: Path) -> None:
        bundle = read_bundle(folder)
        self.manifest, self.tokenizer = bundle.manifest, tokenizer_for(bundle)
        self.kind = self.manifest.attention.kind
        # attnserve divides the logits by the bundle's calibrated temperature (absent: 1)
        self.temperature = self.manifest.calibration.temperature if self.manifest.calibration else 1.0
        # onnxruntime's defaults, as a hand-written server keeps them: an intra-op thread per core
        self.session = ort.InferenceSession(str(bundle.model_path), providers=["CPUExecutionProvider"])

    def classify(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        request, manifest = pb.ClassifyRequest.FromString(raw), self.manifest
        if request.model not in ("", manifest.name):
            context.abort(grpc.StatusCode.NOT_FOUND, f"model {request.model!r} is not served")
        if not request.texts:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "texts: at least one text is required")
        encodings = self.tokenizer.encode_batch(list(request.texts))
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64)  # [B, T]
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)  # [B, T]
        attention = request.attention not in (pb.ATTENTION_MODE_UNSPECIFIED, pb.ATTENTION_MODE_NONE)
        names = ["logits", "attention"] if attention and self.kind != AttentionKind.NONE else ["logits"]
        outputs = self.session.run(names, {"input_ids": ids, "attention_mask": mask})
        logits, probabilities = outputs[0], softmax(outputs[0], self.temperature)  # [B, C] each
        reply = pb.ClassifyResponse(
            model=manifest.name, version=manifest.version, request_id=request.request_id
        )
        for i, encoding in enumerate(encodings):
            n, label_id = int(mask[i].sum()), int(logits[i].argmax())
            result = reply.results.add(
                label=manifest.labels[label_id], label_id=label_id, probabilities=probabilities[i].tolist(),
                logits=logits[i].tolist(), tokens=encoding.tokens[:n], truncated=bool(encoding.overflowing),
            )  # fmt: skip
            if len(outputs) > 1:
                weights = self._pooled(outputs[1][i], n)
                result.attention.shape.extend(weights.shape)
                result.attention.data = np.ascontiguousarray(weights, dtype="<f4").tobytes()
        data: bytes = reply.SerializeToString()
        return data

    def _pooled(self, attention: Any, n: int) -> np.ndarray:
        """The pooling weights ([n]) or the last layer averaged over heads ([n, n])."""
        if self.kind == AttentionKind.POOL:
            return np.asarray(attention[:n])
        if self.kind == AttentionKind.LAYERS:  # [L, H, T, T]
            return np.asarray(attention[-1].mean(axis=0)[:n, :n])
        return np.asarray(attention[:n, :n])  # self-attention [T, T]


def naive(bundle: Path) -> AbstractContextManager[Launched]:
    """This server on `bundle` in a subprocess on a free port; ready on entry."""
    port = free_port()
    command = [sys.executable, "-m", "bench.serving.systems.naive_server", "--bundle", str(bundle),
               "--port", str(port)]  # fmt: skip
    return launched(command, f"127.0.0.1:{port}", health_serving, "the naive server")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, required=True, help="a bundle folder: models/<name>/<version>")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, default=10, help="grpc thread pool size")
    args = parser.parse_args(argv)
    classifier = NaiveClassifier(args.bundle)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads))
    handler = grpc.unary_unary_rpc_method_handler(classifier.classify)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("attnserve.v1.Classifier", {"Classify": handler}),)
    )
    status = health.HealthServicer()
    status.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(status, server)
    if server.add_insecure_port(f"127.0.0.1:{args.port}") == 0:
        print(f"naive_server: cannot listen on 127.0.0.1:{args.port}", file=sys.stderr)
        return 1
    server.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop(grace=5))
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
