"""How a served model looks on the V2 protocol: its tensors, metadata, configuration and
statistics.

Every model has the same tensor contract (only the class count and the attention rank
vary), with a leading batch dimension of up to `max_texts_per_request` texts:

    inputs   TEXT            BYTES  [-1, 1]       tokenized by the server, or
             INPUT_IDS       INT64  [-1, -1]      ids from the bundle's tokenizer, right-padded,
             ATTENTION_MASK  INT64  [-1, -1]      1 on each text's tokens, 0 on padding
    outputs  LOGITS          FP32   [-1, C]
             PROBABILITIES   FP32   [-1, C]
             LABEL           BYTES  [-1, 1]
             ATTENTION       FP32   [-1, -1] (pooling models) or [-1, -1, -1] (encoders: the
                                    last layer averaged over heads), padded with zeros to the
                                    request's longest text; absent for models without attention
             LENGTHS         INT64  [-1]          tokens per text (the unpadded extent of ATTENTION)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client import Histogram

from attnserve.service.engine.model import LoadedModel
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from attnserve.service.settings import Settings

PLATFORM = "onnxruntime_onnx"
BACKEND = "onnxruntime"
TEXT, INPUT_IDS, ATTENTION_MASK = "TEXT", "INPUT_IDS", "ATTENTION_MASK"
LOGITS, PROBABILITIES, LABEL, ATTENTION, LENGTHS = "LOGITS", "PROBABILITIES", "LABEL", "ATTENTION", "LENGTHS"

_CONFIG_TYPES = {"BYTES": pb.TYPE_STRING, "INT64": pb.TYPE_INT64, "FP32": pb.TYPE_FP32}


@dataclass(frozen=True, slots=True)
class TensorDecl:
    name: str
    datatype: str
    shape: tuple[int, ...]  # full shape, batch dimension first


INPUTS = (
    TensorDecl(TEXT, "BYTES", (-1, 1)),
    TensorDecl(INPUT_IDS, "INT64", (-1, -1)),
    TensorDecl(ATTENTION_MASK, "INT64", (-1, -1)),
)


def outputs_of(model: LoadedModel) -> tuple[TensorDecl, ...]:
    classes = len(model.labels)
    declared = [
        TensorDecl(LOGITS, "FP32", (-1, classes)),
        TensorDecl(PROBABILITIES, "FP32", (-1, classes)),
        TensorDecl(LABEL, "BYTES", (-1, 1)),
    ]
    if model.kind == "pool":
        declared.append(TensorDecl(ATTENTION, "FP32", (-1, -1)))
    elif model.kind != "none":
        declared.append(TensorDecl(ATTENTION, "FP32", (-1, -1, -1)))
    declared.append(TensorDecl(LENGTHS, "INT64", (-1,)))
    return tuple(declared)


def metadata(model: LoadedModel, versions: Iterable[int]) -> pb.ModelMetadataResponse:
    def described(decls: Iterable[TensorDecl]) -> list[pb.ModelMetadataResponse.TensorMetadata]:
        return [
            pb.ModelMetadataResponse.TensorMetadata(name=d.name, datatype=d.datatype, shape=d.shape)
            for d in decls
        ]

    return pb.ModelMetadataResponse(
        name=model.name,
        versions=[str(v) for v in sorted(versions)],
        platform=PLATFORM,
        inputs=described(INPUTS),
        outputs=described(outputs_of(model)),
    )


def config(model: LoadedModel, settings: Settings) -> pb.ModelConfig:
    """Triton's view of the model; dims leave out the batch dimension (max_batch_size > 0)."""
    inputs = [
        # Both input forms are optional: a request carries TEXT or INPUT_IDS + ATTENTION_MASK.
        pb.ModelInput(name=d.name, data_type=_CONFIG_TYPES[d.datatype], dims=d.shape[1:], optional=True)
        for d in INPUTS
    ]
    outputs = []
    for d in outputs_of(model):
        output = pb.ModelOutput(name=d.name, data_type=_CONFIG_TYPES[d.datatype], dims=d.shape[1:])
        if not d.shape[1:]:
            output.dims.append(1)
            output.reshape.SetInParent()  # reshape to [] (present but empty): the tensor is [-1]
        outputs.append(output)
    return pb.ModelConfig(
        name=model.name,
        platform=PLATFORM,
        backend=BACKEND,
        max_batch_size=settings.max_texts_per_request,
        input=inputs,
        output=outputs,
        dynamic_batching=pb.ModelDynamicBatching(
            preferred_batch_size=[settings.max_batch_size],
            max_queue_delay_microseconds=int(settings.max_delay_ms * 1000),
            preserve_ordering=True,
        ),
    )


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.ns += int(seconds * 1e9)

    def message(self) -> pb.StatisticDuration:
        return pb.StatisticDuration(count=self.count, ns=self.ns)


@dataclass(slots=True)
class RequestStats:
    """Per-request durations of one model version's V2 inference requests (Triton's meaning:
    `success` is the whole time in the server; queue, compute_input (decoding and
    tokenizing), compute_infer (the batch that carried the request) and compute_output
    (building the reply) are its parts; failures count under `fail` only)."""

    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    last_inference_ms: int = 0


def _count_and_sum(histogram: Histogram) -> tuple[int, float]:
    count, total = 0, 0.0
    for metric in histogram.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count"):
                count = int(sample.value)
            elif sample.name.endswith("_sum"):
                total = sample.value
    return count, total


def statistics(model: LoadedModel, requests: RequestStats) -> pb.ModelStatistics:
    """`inference_count` (texts) and `execution_count` (batches) cover every batch the model
    ran, whichever API its texts came from: a dynamic batch may merge both. The durations
    cover this protocol's requests."""
    executions, texts = _count_and_sum(model.metrics.batch_size)
    return pb.ModelStatistics(
        name=model.name,
        version=str(model.version),
        last_inference=requests.last_inference_ms,
        inference_count=int(texts),
        execution_count=executions,
        inference_stats=pb.InferStatistics(
            success=requests.success.message(),
            fail=requests.fail.message(),
            queue=requests.queue.message(),
            compute_input=requests.compute_input.message(),
            compute_infer=requests.compute_infer.message(),
            compute_output=requests.compute_output.message(),
        ),
    )
