"""``attnserve-export calibrate``: a bundle's next version with a temperature fitted on given rows.

For a bundle whose training run is gone, or whose run had too few validation rows: the
source folder is verified as the service would verify it, its files are copied unchanged
into a staging folder, a temperature is fitted on ``--rows`` through its model.onnx
(calibration.py), and the manifest is written as the next version of the model with that
temperature, its figures and a data profile remeasured on those rows at the new
temperature (the confidences the server will see). The version is read back and published
as writer.py publishes an export. ``measure_bundle`` reads the same figures of a bundle as
it serves, writing nothing: the way to report them on rows that chose nothing.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from attnserve.export.calibration import RowsName, calibrate_graph, ece, nll
from attnserve.export.errors import ExportRequestError
from attnserve.export.evalset import EvalSet, graph_logits
from attnserve.export.parity import cpu_session
from attnserve.export.profile import measure_profile
from attnserve.export.rows_file import LABEL_COLUMN, ROWS_SPLIT, TEXT_COLUMN, read_rows_file
from attnserve.export.writer import check_name, publish, read_back, staged, verify_bundle
from attnserve.service.bundle import (
    Bundle,
    BundleError,
    BundleManifest,
    Problem,
    sha256_file,
    softmax,
    write_manifest,
)
from attnserve.service.bundle.cascade import is_cascade

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalibrateRequest:
    bundle: Path  # models/<name>/<version>
    rows: Path
    repository: Path | None = None  # None: the repository the bundle is in
    name: str | None = None  # None: the bundle's own name
    text_column: str = TEXT_COLUMN
    label_column: str = LABEL_COLUMN


@dataclass(frozen=True)
class Measured:
    """A bundle's probabilities on labelled rows, as it serves them and at T = 1."""

    rows: int
    temperature: float
    accuracy: float
    ece: float
    confidence: float
    nll: float
    ece_uncalibrated: float
    confidence_uncalibrated: float
    nll_uncalibrated: float


def calibrate_bundle(request: CalibrateRequest) -> Path:
    """Fit, write and publish ``repository/name/N`` (the next free N); return that folder."""
    source = _verified(request.bundle)
    manifest = source.manifest
    name = request.name or manifest.name
    check_name(name)
    repository = request.repository or request.bundle.resolve().parent.parent
    rows = read_rows_file(request.rows, manifest.labels, request.text_column, request.label_column)
    named = RowsName(file=request.rows.name, split=ROWS_SPLIT, sha256=sha256_file(request.rows))
    session = cpu_session(source.model_path)
    calibration = calibrate_graph(
        session, source.tokenizer_path, rows, named, manifest.max_len, manifest.truncation
    )
    log.info("temperature %.4f: ECE %.4f -> %.4f", calibration.temperature, calibration.ece_before,
             calibration.ece_after)  # fmt: skip
    profile = manifest.data_profile
    if profile is not None:  # its confidences were those of T = 1: remeasured at the new T
        profile = measure_profile(
            session,
            source.tokenizer_path,
            rows,
            manifest.labels,
            manifest.max_len,
            manifest.truncation,
            manifest.training_metrics,
            temperature=calibration.temperature,
            source=f"{request.rows.name} (attnserve-export calibrate --rows) through model.onnx",
        )
    model_dir = repository / name
    with staged(model_dir) as bundle_dir:
        for file in manifest.files:  # the graphs and tokenizer, byte for byte
            shutil.copyfile(source.root / file, bundle_dir / file)

        def finish(number: int) -> None:
            update = {
                "name": name,
                "version": number,
                "calibration": calibration,
                "data_profile": profile,
                "created_at": datetime.now(UTC),
            }
            written = manifest.model_copy(update=update)
            write_manifest(bundle_dir, BundleManifest.model_validate(written.model_dump()))
            read_back(bundle_dir, name, number)

        return publish(model_dir, bundle_dir, None, finish)


def measure_bundle(
    directory: Path, rows_file: Path, text_column: str = TEXT_COLUMN, label_column: str = LABEL_COLUMN
) -> Measured:
    """ECE, mean confidence and accuracy of a bundle on labelled rows, through its model.onnx
    in onnxruntime at its own temperature (and at T = 1, to compare); writes nothing."""
    bundle = _verified(directory)
    manifest = bundle.manifest
    rows: EvalSet = read_rows_file(rows_file, manifest.labels, text_column, label_column)
    logits = graph_logits(
        cpu_session(bundle.model_path),
        bundle.tokenizer_path,
        rows.texts,
        manifest.max_len,
        manifest.truncation,
    )
    temperature = manifest.calibration.temperature if manifest.calibration is not None else 1.0
    served, plain = softmax(logits, temperature), softmax(logits)
    return Measured(
        rows=len(rows),
        temperature=temperature,
        accuracy=float((logits.argmax(axis=1) == rows.labels).mean()),
        ece=ece(served, rows.labels),
        confidence=float(served.max(axis=1).mean()),
        nll=nll(logits, rows.labels, temperature),
        ece_uncalibrated=ece(plain, rows.labels),
        confidence_uncalibrated=float(plain.max(axis=1).mean()),
        nll_uncalibrated=nll(logits, rows.labels, 1.0),
    )


def _verified(directory: Path) -> Bundle:
    """The bundle, verified; refused unless its scores are a softmax, the one thing a
    temperature calibrates (a multi-label bundle's sigmoids have thresholds instead)."""
    if is_cascade(directory):
        raise ExportRequestError(
            f"{directory} is a cascade: calibrate its members' bundles, then build the cascade from them"
        )
    try:
        bundle = verify_bundle(directory)
    except BundleError as exc:
        raise ExportRequestError(f"{directory} does not verify as a bundle: {exc}") from None
    scores = bundle.manifest.scores
    if scores.problem != Problem.SINGLE_LABEL:
        what = "a sigmoid per label, assigned at its own threshold" if scores.multi else "a value"
        raise ExportRequestError(
            f"{directory} is a {scores.problem.value} bundle ({what}): temperature scaling and its "
            "figures (ECE, NLL, accuracy) are for a softmax over the labels; there is nothing to calibrate"
        )
    return bundle
