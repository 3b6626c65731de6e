"""`attnserve-export DIR` for a document run (`attnserve-train document`, DIR/document.json):
the window bundle's files published as a new version whose long-text policy is the run's.

The run names the window model (a bundle version folder) and the sha256 of the model files
its head was trained on; a file that changed since, or went, is refused by name, since the
head reads those windows' logits. The new version holds the same files (model.onnx,
tokenizer.json, label.onnx where there is one; re-hashed), and a copy of the window bundle's
manifest renamed and renumbered, with `long_texts` set to the run's policy (window, stride,
combination chosen on validation, the head where it won, the validation figures) and the
run's figures under `training_metrics.document`. A head that reads the windows' vectors gets
them from the graphs themselves: model.onnx and the label graph are written with the extra
`vector` output (export/vector_graph.py, checked on the golden cases' ids) and the manifest
declares it; every other version's graphs stay byte for byte the window bundle's. It is built
and read back as every export is (writer.py: staged, `read_back`, published in one rename).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from rich.console import Console

from attnserve.export.errors import ExportRequestError
from attnserve.export.vector_graph import VECTOR, NoFinalLayer, write_with_vector
from attnserve.export.writer import check_name, publish, read_back, staged
from attnserve.service.bundle import (
    MODEL_FILE,
    Bundle,
    BundleError,
    BundleManifest,
    TensorSpec,
    hash_files,
    read_bundle,
    sha256_file,
    write_manifest,
)
from attnserve.training.document.record import DocumentRecord, RecordError, is_document_run, read_record

# Flags that make no sense for a document run: its graphs are the window bundle's, as exported.
NOT_FOR_DOCUMENT = (
    "quantize",
    "optimize",
    "rows",
    "max_len",
    "long_texts",
    "window",
    "stride",
    "combine",
    "max_windows",
    "no_calibration",
)

__all__ = ["document_command", "export_document", "is_document_run"]


def export_document(run_dir: Path, repository: Path, name: str, version: int | None = None) -> Path:
    """Publish the document run at `run_dir` as `repository/name/N`; return that folder."""
    try:
        record = read_record(run_dir)
    except RecordError as exc:
        raise ExportRequestError(str(exc)) from None
    check_name(name)
    if version is not None and version < 1:
        raise ExportRequestError(f"versions are positive integers, got {version}")
    window = _window_bundle(record, run_dir)
    model_dir = Path(repository) / name
    with staged(model_dir) as bundle_dir:
        vector = _copy_graphs(window, record, bundle_dir)
        return publish(
            model_dir,
            bundle_dir,
            version,
            lambda number: _finish(window.manifest, record, run_dir, bundle_dir, name, number, vector),
        )


def _copy_graphs(window: Bundle, record: DocumentRecord, bundle_dir: Path) -> int | None:
    """Copy the window bundle's files; the graphs with their `vector` output where the policy's
    head reads it. Returns the vector's size, None where the graphs are copied as they are."""
    m = window.manifest
    graphs = {MODEL_FILE} | ({m.label_graph.file} if m.label_graph is not None else set())
    needs = record.policy.reads_vectors
    rows = [case.input_ids for case in m.golden if case.input_ids]
    if needs and not rows:
        raise ExportRequestError(
            f"the window model {window.root} has no golden ids to check its vector output on"
        )
    vector = None
    for file in m.files:
        if not (needs and file in graphs):
            shutil.copyfile(window.root / file, bundle_dir / file)
            continue
        try:
            vector = write_with_vector(window.root / file, bundle_dir / file, rows, m.pad_id)
        except NoFinalLayer as exc:
            raise ExportRequestError(f"the document head reads window vectors, but {file}: {exc}") from None
    return vector


def _window_bundle(record: DocumentRecord, run_dir: Path) -> Bundle:
    """The window bundle, with every model file the head was trained on unchanged."""
    source = Path(record.window_model.path)
    again = "train the document head again (attnserve-train document)"
    for file, digest in record.window_model.files.items():
        path = source / file
        if not path.is_file():
            raise ExportRequestError(f"the window model {source} has no {file} any more; {again}")
        now = sha256_file(path)
        if now != digest:
            raise ExportRequestError(
                f"the window model {source} changed since {run_dir} was trained: {file} has sha256 "
                f"{now[:16]}…, the head was trained on {digest[:16]}…; {again}"
            )
    try:
        bundle = read_bundle(source)
    except BundleError as exc:
        raise ExportRequestError(f"the window model {source} does not verify: {exc}") from None
    added = sorted(set(bundle.manifest.files) - set(record.window_model.files))
    if added:
        raise ExportRequestError(
            f"the window model {source} changed since {run_dir} was trained: it has "
            f"{', '.join(added)} now; {again}"
        )
    return bundle


def _finish(
    window: BundleManifest,
    record: DocumentRecord,
    run_dir: Path,
    bundle_dir: Path,
    name: str,
    number: int,
    vector: int | None,
) -> None:
    """Write bundle.json for version `number`: the window bundle's, with the run's policy."""
    data = window.model_dump(mode="json", exclude={"created_at"})
    document: dict[str, Any] = {
        "run": str(run_dir.resolve()),
        "window_model": f"{window.name}/{window.version}",
        "combine": record.policy.combine,
        "figures": record.figures,
    }
    data |= {
        "name": name,
        "version": number,
        "files": hash_files(bundle_dir, list(window.files)),
        "long_texts": record.policy.model_dump(mode="json"),
        "training_metrics": {**window.training_metrics, "document": document},
    }
    if vector is not None:
        spec = TensorSpec(name=VECTOR, dtype="float32", shape=["batch", vector])
        data["outputs"] = [*data["outputs"], spec.model_dump(mode="json")]
    try:
        manifest = BundleManifest.model_validate(data)
    except ValueError as exc:
        raise ExportRequestError(f"{run_dir}: the policy does not fit the window model: {exc}") from None
    write_manifest(bundle_dir, manifest)
    read_back(bundle_dir, name, number)


def document_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """`attnserve-export DIR --repository R --name N [--version V]` for a document run."""
    given = [name for name in NOT_FOR_DOCUMENT if getattr(args, name) != parser.get_default(name)]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ExportRequestError(
            f"{flag} does not apply to {args.run_dir}, a document run: it publishes the window bundle's "
            "files as they are, with the policy the run chose"
        )
    console = Console()
    with console.status(f"exporting the document run {args.run_dir} as {args.name}"):
        path = export_document(args.run_dir, args.repository, args.name, args.version)
    manifest = read_bundle(path).manifest
    policy = manifest.long_texts
    assert policy is not None
    files = ", ".join(f"{file} ({(path / file).stat().st_size} B)" for file in sorted(manifest.files))
    chosen = ", ".join(f"{combine} {accuracy:.4f}" for combine, accuracy in (policy.chosen or {}).items())
    console.print(f"wrote {path}: {manifest.name} version {manifest.version}, {files}")
    console.print(
        f"long texts: windows of {policy.window} tokens sharing {policy.stride}, at most "
        f"{policy.max_windows}, combined by {policy.combine} (validation accuracy: {chosen})"
    )
    console.print(f"read back: sha256 verified, I/O as declared, {len(manifest.golden)} golden cases match")
    return 0
