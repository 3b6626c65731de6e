"""Export a run's model and prove it: the graph, its parity, and the optional int8/optimized forms.

The result is a folder holding ``model.onnx`` and ``tokenizer.json`` plus everything the
manifest records about them; ``export.writer`` turns that into a published version. Order:
export -> checker and declared I/O -> parity with PyTorch (float tolerance) -> [int8
quantization] -> [onnxruntime optimization, parity again] -> [int8 accuracy gate on the run's
held-out test split] -> golden cases from PyTorch (for int8, within the gate's declared
tolerance) -> [an encoder's label graph: logits only, int8 per channel when its gate holds
(label_graph.py)] -> [the temperature, fitted on the validation split through the shipped
model.onnx (calibration.py)] -> the data profile at that temperature. Every text is cut on the
side the run trained on, as the server will cut it. Which labelled texts each step reads is
the source's (held_out.py): a run's splits, or the rows given with an imported model.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import onnx

from attnserve.export.calibration import calibrate_or_warn
from attnserve.export.contract import GraphContract, graph_contract
from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet
from attnserve.export.golden import DEFAULT_COUNT, golden_deviation, make_golden
from attnserve.export.held_out import HeldOut
from attnserve.export.label_graph import LabelSource, build_label_graph
from attnserve.export.long_text_calibration import window_calibration
from attnserve.export.onnx import (
    DEFAULT_EXPORTER,
    DEFAULT_OPSET,
    Exporter,
    check_opset,
    export_model,
    graph_opset,
    verify_graph,
)
from attnserve.export.optimize import EncoderShape, optimize_graph
from attnserve.export.parity import DEFAULT_TOLERANCE, ParityResult, cpu_session, measure_parity
from attnserve.export.profile import measure_profile
from attnserve.export.quantize import (
    DEFAULT_INT8_TOLERANCE,
    DEFAULT_MAX_DROP,
    METHODS,
    check_accuracy,
    check_golden_tolerance,
    check_tolerance,
    quantize_int8,
)
from attnserve.service.bundle import (
    LABEL_MODEL_FILE,
    MODEL_FILE,
    TOKENIZER_FILE,
    Calibration,
    DataProfile,
    GateRows,
    GoldenCase,
    LabelGraph,
    LongTexts,
    ParityReport,
    QuantizationInfo,
    Scoring,
    Truncation,
)
from attnserve.training.models import REGISTRY
from attnserve.training.models.base import Classifier
from attnserve.training.run.checkpoint import LoadedRun

log = logging.getLogger(__name__)
NO_QUANTIZATION = "none"  # --quantize none: float32 for both graphs of a family with a label graph


@dataclass(frozen=True)
class ExportOptions:
    """How to export; defaults are the documented ones (docs/export.md)."""

    quantize: str | None = None
    optimize: bool = False
    opset: int = DEFAULT_OPSET
    exporter: Exporter = DEFAULT_EXPORTER
    tolerance: float = DEFAULT_TOLERANCE
    max_accuracy_drop: float = DEFAULT_MAX_DROP  # a fraction: 0.01 = one accuracy point
    int8_tolerance: float = DEFAULT_INT8_TOLERANCE  # golden-case tolerance of an int8 graph
    golden_count: int = DEFAULT_COUNT
    seed: int = 0
    calibrate: bool = True  # fit a temperature on the validation split (False: served at T = 1)
    # The bundle's long-text policy: its temperature is fitted on the texts read as those windows.
    long_texts: LongTexts | None = None

    def validate(self) -> None:
        if self.quantize is not None and self.quantize not in (*METHODS, NO_QUANTIZATION):
            raise ExportRequestError(
                f"unknown quantization {self.quantize!r}; supported: {', '.join((*METHODS, NO_QUANTIZATION))}"
            )
        check_opset(self.exporter, self.opset)
        check_tolerance(self.int8_tolerance)
        if not self.tolerance > 0:
            raise ExportRequestError(f"parity tolerance must be > 0, got {self.tolerance}")


@dataclass(frozen=True)
class Built:
    """The proven files in a bundle folder, and what the manifest says about them."""

    parity: ParityReport
    golden: list[GoldenCase]
    quantization: QuantizationInfo | None
    opset: int
    contract: GraphContract
    truncation: Truncation
    profile: DataProfile | None = None
    label_graph: LabelGraph | None = None  # the logits-only graph beside model.onnx, where the family has one
    calibration: Calibration | None = None  # None: no temperature (not asked, or the rows place none)
    scoring: Scoring | None = None  # what the scores mean (held_out.py); None: a softmax over the labels


def build_files(
    run: LoadedRun, held_out: HeldOut, bundle_dir: Path, work: Path, options: ExportOptions
) -> Built:
    """Export and prove the graph, then place model.onnx and tokenizer.json in ``bundle_dir``."""
    model = run.model.cpu().eval()
    hints = REGISTRY[run.family].export
    truncation = run_truncation(run)
    int8 = options.quantize in METHODS
    gate = None
    if int8:  # read first: a source without held-out rows fails before the slow steps
        gate = held_out.gate()
    label_gate = gate
    if hints.label_graph and options.quantize is None:
        label_gate = _optional_gate(held_out)
    contract = graph_contract(model)
    graph = work / "exported.onnx"
    log.info("exporting %s with the %s exporter, opset %d", run.family, options.exporter, options.opset)
    export_model(model, graph, contract, opset=options.opset, exporter=options.exporter)
    verify_graph(graph, contract)
    parity = _parity(run, graph, options, options.tolerance, "the exported graph")
    float_graph = graph
    if int8:
        quantized = work / "quantized.onnx"
        quantize_int8(graph, quantized, per_channel=hints.per_channel_int8)
        verify_graph(quantized, contract)
        graph = quantized
    unoptimized = graph  # the cut to logits keeps standard operators only
    if options.optimize:
        optimized = work / "optimized.onnx"
        optimize_graph(graph, optimized, fusion_shape(model))
        verify_graph(optimized, contract, standard_ops_only=False)
        graph = optimized
    quantization = None
    golden_tolerance = options.tolerance
    if gate is not None:
        rows, named = gate
        change = check_accuracy(
            float_graph,
            graph,
            tokenizer_path=run.tokenizer_path,
            rows=rows,
            named=named,
            max_len=run.max_len,
            truncation=truncation,
            max_drop=options.max_accuracy_drop,
            tolerance=options.int8_tolerance,
            metric=held_out.metric,
        )
        quantization = change.info()
        # int8 outputs are not expected within the float tolerance: the sweep still enforces
        # finite outputs and zero attention on padding, and records how far int8 strays.
        parity = _parity(run, graph, options, None, "the int8 graph")
        golden_tolerance = options.int8_tolerance
    elif options.optimize:
        parity = _parity(run, graph, options, options.tolerance, "the optimized graph")
    shutil.copyfile(graph, bundle_dir / MODEL_FILE)
    shutil.copyfile(run.tokenizer_path, bundle_dir / TOKENIZER_FILE)  # the source's file, byte for byte
    golden = make_golden(
        model,
        bundle_dir / TOKENIZER_FILE,
        held_out.golden_texts,
        max_len=run.max_len,
        truncation=truncation,
        tolerance=golden_tolerance,
    )
    session = cpu_session(graph)  # the shipped graph, as the server will run it
    if gate is not None:
        seen = golden_deviation(session, golden, bundle_dir / TOKENIZER_FILE, run.max_len, truncation)
        check_golden_tolerance(seen, options.int8_tolerance)
    label_graph = None
    if hints.label_graph:
        label_graph = build_label_graph(
            LabelSource(
                graph=unoptimized,
                float_graph=float_graph,
                tokenizer=bundle_dir / TOKENIZER_FILE,
                max_len=run.max_len,
                truncation=truncation,
                golden=golden,
                gate=label_gate,
                max_drop=options.max_accuracy_drop,
                int8_tolerance=options.int8_tolerance,
                tolerance=golden_tolerance,
                quantization=quantization,
                metric=held_out.metric,
            ),
            work,
            bundle_dir / LABEL_MODEL_FILE,
            try_int8=options.quantize is None,
        )
    calibration = None
    tokenizer = bundle_dir / TOKENIZER_FILE
    # On the validation split: the test split stays unseen for reported figures.
    if options.calibrate and held_out.validation is not None:
        rows, validation = held_out.validation
        if options.long_texts is not None:
            calibration = window_calibration(session, tokenizer, rows, validation, run.max_len, truncation,
                                             options.long_texts, run.pad_id)  # fmt: skip
        else:
            calibration = calibrate_or_warn(session, tokenizer, rows, validation, run.max_len, truncation)
    # What the shipped graph predicts on held-out texts: the server's drift reference.
    profile = None
    if held_out.profile is not None:
        rows, source = held_out.profile
        profile = measure_profile(
            session,
            tokenizer,
            rows,
            run.labels,
            run.max_len,
            truncation,
            run.metrics,
            temperature=calibration.temperature if calibration is not None else 1.0,
            source=source,
        )
    return Built(
        parity=parity.report(),
        golden=golden,
        quantization=quantization,
        opset=graph_opset(onnx.load(str(graph))),
        contract=contract,
        truncation=truncation,
        profile=profile,
        label_graph=label_graph,
        calibration=calibration,
        scoring=held_out.scoring,
    )


def run_truncation(run: LoadedRun) -> Truncation:
    """The end of a long text the run trained on, which the bundle must serve."""
    if run.truncation == "head+tail":
        # The server's tokenizer keeps one end of a long text, not both.
        raise ExportRequestError(
            f"{run.run_dir} was trained with --truncation head+tail, which the server cannot reproduce; "
            "retrain with --truncation head or tail"
        )
    if run.truncation not in ("head", "tail"):
        raise ExportRequestError(f"{run.run_dir}: unknown truncation {run.truncation!r} in its checkpoint")
    return "tail" if run.truncation == "tail" else "head"


def _optional_gate(held_out: HeldOut) -> tuple[EvalSet, GateRows] | None:
    """The held-out rows for the label graph's int8 gate; None (float32) without them."""
    try:
        return held_out.gate()
    except ExportRequestError as exc:
        log.warning("label graph stays float32: %s", exc)
        return None


def fusion_shape(model: Classifier) -> EncoderShape | None:
    """Heads and width for onnxruntime's transformer fusions, where the family has them."""
    shape = REGISTRY[model.family].export.fusion_shape
    if shape is None:
        return None
    heads, hidden = shape(model.config)
    return EncoderShape(heads=heads, hidden=hidden)


def _parity(
    run: LoadedRun, graph: Path, options: ExportOptions, tolerance: float | None, what: str
) -> ParityResult:
    result = measure_parity(
        run.model, cpu_session(graph), max_len=run.max_len, tolerance=tolerance, seed=options.seed
    )
    result.raise_on_failure(what)
    log.info(
        "parity of %s: logits %.3g, attention %s",
        what,
        result.logits_max_abs_diff,
        result.attention_max_abs_diff,
    )
    return result
