"""NVIDIA Triton (from the nvidia-pytriton wheel) serving an attnserve bundle, for the benchmark.

Runs in its own environment (pytriton-env.sh beside it), importing nothing from this project.
`<model>` takes TEXT and tokenizes in the inference function, `<model>_ids` takes INPUT_IDS +
ATTENTION_MASK; both answer the tensors attnserve's V2 API declares, dynamic batching on.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig
from tokenizers import Tokenizer


class Classifier:
    def __init__(self, bundle: Path) -> None:
        manifest = json.loads((bundle / "bundle.json").read_text())
        self.labels = np.asarray([str(label).encode() for label in manifest["labels"]], dtype=object)
        self.kind = manifest["attention"]["kind"]
        self.pad_id = int(manifest["pad_id"])
        self.tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=int(manifest["max_len"]))
        self.tokenizer.enable_padding(pad_id=self.pad_id)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(bundle / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.names = ["logits"] if self.kind == "none" else ["logits", "attention"]

    def text(self, TEXT: np.ndarray) -> dict[str, np.ndarray]:
        texts = [value.decode() for value in TEXT[:, 0]]
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64)  # [B, T]
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)  # [B, T]
        return self.run(ids, mask)

    def ids(self, INPUT_IDS: np.ndarray, ATTENTION_MASK: np.ndarray) -> dict[str, np.ndarray]:
        return self.run(INPUT_IDS.astype(np.int64), ATTENTION_MASK.astype(np.int64))

    def run(self, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        outputs = self.session.run(self.names, {"input_ids": ids, "attention_mask": mask})
        logits = outputs[0]  # [B, C]
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        result = {
            "LOGITS": logits.astype(np.float32),
            "PROBABILITIES": (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32),
            "LABEL": self.labels[logits.argmax(axis=1)][:, None],
            "LENGTHS": mask.sum(axis=1).astype(np.int64),
        }
        if self.kind != "none":
            attention = outputs[1]
            if self.kind == "layers":  # [B, L, H, T, T] -> last layer, mean over heads ("self" is [B, T, T])
                attention = attention[:, -1].mean(axis=1)
            result["ATTENTION"] = attention.astype(np.float32)
        return result


def outputs(kind: str) -> list[Tensor]:
    declared = [
        Tensor(name="LOGITS", dtype=np.float32, shape=(-1,)),
        Tensor(name="PROBABILITIES", dtype=np.float32, shape=(-1,)),
        Tensor(name="LABEL", dtype=bytes, shape=(1,)),
        Tensor(name="LENGTHS", dtype=np.int64, shape=(1,)),
    ]
    if kind == "pool":
        declared.append(Tensor(name="ATTENTION", dtype=np.float32, shape=(-1,)))
    elif kind != "none":
        declared.append(Tensor(name="ATTENTION", dtype=np.float32, shape=(-1, -1)))
    return declared


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--grpc-port", "--http-port", "--metrics-port"):
        parser.add_argument(flag, type=int, required=True)
    parser.add_argument("--bundle", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-delay-us", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    classifier = Classifier(args.bundle)
    config = TritonConfig(grpc_address="127.0.0.1", grpc_port=args.grpc_port, http_address="127.0.0.1",
                          http_port=args.http_port, metrics_port=args.metrics_port, allow_metrics=False,
                          log_verbose=0)  # fmt: skip
    batcher = DynamicBatcher(max_queue_delay_microseconds=args.max_delay_us)
    model_config = ModelConfig(max_batch_size=args.max_batch_size, batcher=batcher)
    # perf_analyzer reads ModelStatistics; PyTriton guards it with a token by default. The
    # server listens on 127.0.0.1 only, so statistics are left open and the rest stays guarded.
    security = TritonSecurityConfig(
        restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"]
    )
    text = [Tensor(name="TEXT", dtype=bytes, shape=(1,))]
    ids = [Tensor(name=name, dtype=np.int64, shape=(-1,)) for name in ("INPUT_IDS", "ATTENTION_MASK")]
    with Triton(config=config, security_config=security) as triton:
        for name, infer, inputs in (
            (args.model, classifier.text, text),
            (f"{args.model}_ids", classifier.ids, ids),
        ):
            triton.bind(model_name=name, infer_func=batch(infer), inputs=inputs,
                        outputs=outputs(classifier.kind), config=model_config, strict=False)  # fmt: skip
        triton.serve()


if __name__ == "__main__":
    main()
