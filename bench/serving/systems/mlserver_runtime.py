"""An MLServer custom runtime serving an attnserve bundle with onnxruntime (for the benchmark).

Runs inside MLServer's own environment (.venv-mlserver, made by mlserver-env.sh beside it), so it
imports nothing from this project: it reads the bundle's files itself. Input `TEXT` (BYTES,
[n, 1]); outputs `LABEL` (BYTES, [n, 1]) and `PROBABILITIES` (FP32, [n, C]). MLServer's
adaptive batching (max_batch_size / max_batch_time in model-settings.json) merges requests
before `predict`, which pads the batch to its longest text.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.types import InferenceRequest, InferenceResponse
from tokenizers import Tokenizer


class AttnOnnxRuntime(MLModel):  # type: ignore[misc]  # MLServer is not installed in the project's venv
    async def load(self) -> bool:
        bundle = Path(self.settings.parameters.uri)
        manifest = json.loads((bundle / "bundle.json").read_text())
        self._labels = [str(label) for label in manifest["labels"]]
        self._tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=int(manifest["max_len"]))
        self._tokenizer.enable_padding(pad_id=int(manifest["pad_id"]))
        extra = self.settings.parameters.extra or {}
        options = ort.SessionOptions()
        options.intra_op_num_threads = int(extra.get("intra_op_threads", 1))
        self._session = ort.InferenceSession(
            str(bundle / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        texts = [str(text) for text in StringCodec.decode_input(payload.inputs[0])]
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.asarray([e.ids for e in encodings], dtype=np.int64)  # [B, T]
        mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)  # [B, T]
        (logits,) = self._session.run(["logits"], {"input_ids": ids, "attention_mask": mask})  # [B, C]
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32)  # [B, C]
        labels = [self._labels[i] for i in logits.argmax(axis=1).tolist()]
        outputs = [StringCodec.encode_output("LABEL", labels),
                   NumpyCodec.encode_output("PROBABILITIES", probabilities)]  # fmt: skip
        return InferenceResponse(
            model_name=self.name, model_version=self.version, id=payload.id, outputs=outputs
        )
