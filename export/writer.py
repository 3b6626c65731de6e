"""Turn a training run (or a Hugging Face classifier folder: source.py) into a new,
never-overwritten bundle version: ``repository/name/N/``.

Everything is built and proven inside a staging folder in ``repository/name/`` (its name
starts with ``STAGING_PREFIX``, which readers skip), read back with the service's own reader,
and only then renamed to ``N`` in one ``os.rename``: a reader sees no version or a complete
one. Version numbers are chosen, checked and claimed under an exclusive lock on the model
folder, so two exports running at once never take the same number, and an existing version
is never replaced.
"""

from __future__ import annotations

import dataclasses
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attnserve.export.errors import ExportError, ExportRequestError
from attnserve.export.golden import DEFAULT_COUNT, golden_deviation, verify_golden
from attnserve.export.onnx import DEFAULT_EXPORTER, DEFAULT_OPSET, Exporter
from attnserve.export.parity import DEFAULT_TOLERANCE, cpu_session
from attnserve.export.pipeline import Built, ExportOptions, build_files, run_truncation
from attnserve.export.quantize import DEFAULT_INT8_TOLERANCE, DEFAULT_MAX_DROP
from attnserve.export.rows_file import LABEL_COLUMN, TEXT_COLUMN
from attnserve.export.source import open_source
from attnserve.service.bundle import (
    MODEL_FILE,
    NAME_PATTERN,
    STAGING_PREFIX,
    TOKENIZER_FILE,
    Bundle,
    BundleError,
    BundleManifest,
    LongTexts,
    check_io,
    check_label_io,
    hash_files,
    label_tolerance,
    read_bundle,
    write_manifest,
)
from attnserve.training.long_texts.record import recorded_policy
from attnserve.training.run.checkpoint import LoadedRun

log = logging.getLogger(__name__)
LOCK_FILE = ".export.lock"


def export_run(
    run_dir: str | Path,
    repository: str | Path,
    name: str,
    version: int | None = None,
    *,
    quantize: str | None = None,
    optimize: bool = False,
    opset: int = DEFAULT_OPSET,
    exporter: Exporter = DEFAULT_EXPORTER,
    tolerance: float = DEFAULT_TOLERANCE,
    max_accuracy_drop: float = DEFAULT_MAX_DROP,
    int8_tolerance: float = DEFAULT_INT8_TOLERANCE,
    golden_count: int = DEFAULT_COUNT,
    seed: int = 0,
    calibrate: bool = True,
    rows: Path | None = None,
    max_len: int | None = None,
    text_column: str = TEXT_COLUMN,
    label_column: str = LABEL_COLUMN,
    long_texts: Callable[[int], LongTexts] | None = None,
) -> Path:
    """Export, prove and publish ``run_dir`` as ``repository/name/N``; return that folder.
    ``rows`` (its ``text_column`` and ``label_column``) and ``max_len``: a Hugging Face folder's
    held-out rows and longest input (source.py); ``long_texts``: how the server reads a text
    over max_len as windows (service/bundle/long_texts.py), made for the model's max_len."""
    options = ExportOptions(
        quantize=quantize,
        optimize=optimize,
        opset=opset,
        exporter=exporter,
        tolerance=tolerance,
        max_accuracy_drop=max_accuracy_drop,
        int8_tolerance=int8_tolerance,
        golden_count=golden_count,
        seed=seed,
        calibrate=calibrate,
    )
    options.validate()
    check_name(name)
    if version is not None and version < 1:
        raise ExportRequestError(f"versions are positive integers, got {version}")
    model_dir = Path(repository) / name
    if version is not None and _taken(model_dir, version):
        raise ExportRequestError(f"{model_dir / str(version)} already exists; versions are never overwritten")
    with open_source(
        Path(run_dir),
        golden_count,
        rows=rows,
        max_len=max_len,
        text_column=text_column,
        label_column=label_column,
    ) as (run, held_out):
        run_truncation(run)  # refused before any folder is made
        policy = long_texts(run.max_len) if long_texts is not None else _recorded(run)
        if policy is not None:
            try:
                policy.check(run.max_len)
            except ValueError as exc:
                raise ExportRequestError(f"--window: {exc}") from None
        options = dataclasses.replace(options, long_texts=policy)  # its temperature reads the windows
        with staged(model_dir) as bundle_dir:
            built = build_files(run, held_out, bundle_dir, bundle_dir.parent, options)
            return publish(
                model_dir,
                bundle_dir,
                version,
                lambda number: _finish(run, bundle_dir, name, number, built, options, policy),
            )


def _recorded(run: LoadedRun) -> LongTexts | None:
    """The policy a run trained with --long-texts chose on validation (long_texts.json)."""
    try:
        return recorded_policy(run.run_dir)
    except ValueError as exc:
        raise ExportRequestError(str(exc)) from None


def check_name(name: str) -> None:
    if not NAME_PATTERN.match(name) or name.startswith("."):
        raise ExportRequestError(
            f"model name {name!r} must match {NAME_PATTERN.pattern} and not start with '.'"
        )


@contextmanager
def staged(model_dir: Path) -> Iterator[Path]:
    """A new version's folder while it is built: `bundle/` (a name the reader accepts) inside a
    staging folder the reader skips, with room beside it for scratch files; removed at the end
    (after `publish` has moved `bundle/` into place, or on any failure)."""
    model_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=model_dir))
    try:
        bundle_dir = staging / "bundle"
        bundle_dir.mkdir()
        yield bundle_dir
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(model_dir: Path, bundle_dir: Path, version: int | None, finish: Callable[[int], None]) -> Path:
    """Claim `version` (None: the next free one) under the model folder's lock, let `finish`
    write that version's manifest into `bundle_dir`, then move it into place in one rename."""
    with _locked(model_dir):
        number = version if version is not None else _next_version(model_dir)
        if _taken(model_dir, number):
            raise ExportRequestError(
                f"{model_dir / str(number)} already exists; versions are never overwritten"
            )
        finish(number)
        target = model_dir / str(number)
        os.rename(bundle_dir, target)
        _fsync_dir(model_dir)
    log.info("wrote %s", target)
    return target


def _finish(
    run: LoadedRun,
    bundle_dir: Path,
    name: str,
    number: int,
    built: Built,
    options: ExportOptions,
    long_texts: LongTexts | None = None,
) -> None:
    """Write bundle.json for version ``number`` and read the bundle back as the service will."""
    contract = built.contract
    manifest = BundleManifest(
        name=name,
        version=number,
        family=run.family,
        labels=run.labels,
        max_len=run.max_len,
        truncation=built.truncation,
        pad_id=run.pad_id,
        attention=contract.attention,
        inputs=contract.inputs,
        outputs=contract.outputs,
        opset=built.opset,
        exporter=options.exporter,
        files=hash_files(bundle_dir, [MODEL_FILE, TOKENIZER_FILE, *_label_files(built)]),
        training_metrics=dict(run.metrics),
        parity=built.parity,
        golden=built.golden,
        quantization=built.quantization,
        data_profile=built.profile,
        label_graph=built.label_graph,
        calibration=built.calibration,
        scoring=built.scoring,
        long_texts=long_texts,
    )
    write_manifest(bundle_dir, manifest)
    read_back(bundle_dir, name, number)


def read_back(bundle_dir: Path, name: str, number: int) -> None:
    """Read a written bundle as the service will, then flush its files and folder to disk."""
    try:
        verify_bundle(bundle_dir, name, number)
    except BundleError as exc:
        raise ExportRequestError(f"the written bundle does not read back: {exc}") from exc
    for path in bundle_dir.iterdir():
        _fsync_file(path)
    _fsync_dir(bundle_dir)


def verify_bundle(directory: Path, name: str | None = None, number: int | None = None) -> Bundle:
    """A bundle folder checked as the service checks it at load: files and sha256, declared
    I/O, the golden outputs of each graph; BundleError or ExportError names the mismatch."""
    bundle = read_bundle(directory, expect_name=name, expect_version=number)
    session = cpu_session(bundle.model_path)
    check_io(bundle.manifest, session)
    read = bundle.manifest
    verify_golden(session, read.golden, bundle.tokenizer_path, read.max_len, read.truncation)
    if bundle.label_model_path is not None:
        _verify_label_graph(bundle)
    return bundle


def _label_files(built: Built) -> list[str]:
    return [] if built.label_graph is None else [built.label_graph.file]


def _verify_label_graph(bundle: Bundle) -> None:
    """The label graph reads back with the manifest's inputs, logits alone, and the golden logits."""
    read = bundle.manifest
    assert bundle.label_model_path is not None
    session = cpu_session(bundle.label_model_path)
    check_label_io(read, session)
    for case in read.golden:
        seen = golden_deviation(
            session, [case], bundle.tokenizer_path, read.max_len, read.truncation, logits_only=True
        )
        if not seen <= label_tolerance(read, case.tolerance):
            raise ExportError(f"golden text {case.text!r}: the label graph differs by {seen:.3g}")


def _taken(model_dir: Path, number: int) -> bool:
    """Whether ``number`` is in use under any spelling (``3``, ``03``) or by any kind of entry."""
    if not model_dir.is_dir():
        return False
    return any(entry.name.isdigit() and int(entry.name) == number for entry in model_dir.iterdir())


def _next_version(model_dir: Path) -> int:
    numbers = [int(entry.name) for entry in model_dir.iterdir() if entry.name.isdigit()]
    return max(numbers, default=0) + 1


@contextmanager
def _locked(model_dir: Path) -> Iterator[None]:
    """Exclusive advisory lock on the model folder while a version number is claimed."""
    fd = os.open(model_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
