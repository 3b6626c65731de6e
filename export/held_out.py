"""The labelled texts an export reads besides the model, and where each kind comes from.

A training run has its own: the golden cases are validation texts, the temperature and the
data profile are measured on the validation split (``eval.jsonl``), and the int8 gates on the
test split (``test.jsonl``), which chose nothing. A model imported from elsewhere
(hf_import.py) brings what it has. The pipeline reads them only through ``HeldOut``.

An imported model also says what its scores mean (``scoring``: a multi-label model's
thresholds are chosen on its rows) and so how the int8 gates score those rows (``metric``);
a training run's are a softmax over its labels and accuracy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from attnserve.export.calibration import RowsName
from attnserve.export.evalset import EvalSet, read_eval_set, read_gate_rows
from attnserve.export.golden import pick_texts
from attnserve.export.profile import SOURCE
from attnserve.export.quantize import ACCURACY, GateMetric
from attnserve.service.bundle import GateRows, Scoring, sha256_file
from attnserve.training.run.checkpoint import LoadedRun

# The int8 gates' rows, read when a gate asks for them: ExportRequestError when there are none.
GateSource = Callable[[], tuple[EvalSet, GateRows]]


@dataclass(frozen=True)
class HeldOut:
    golden_texts: list[str]  # the golden cases' texts, in order
    validation: tuple[EvalSet, RowsName] | None  # a temperature is fitted on these; None: none is
    profile: tuple[EvalSet, str] | None  # the data profile's texts and how it names them; None: no profile
    gate: GateSource
    scoring: Scoring | None = None  # the bundle's scoring; None: a softmax over the labels
    metric: GateMetric = ACCURACY  # how the int8 gates score the gate's rows


def run_held_out(run: LoadedRun, golden_count: int) -> HeldOut:
    """A training run's own rows; ExportError when it has no validation split."""
    eval_set = read_eval_set(run.eval_path, len(run.labels))
    assert run.eval_path is not None  # read_eval_set has read it
    validation = RowsName(run.eval_path.name, "validation", sha256_file(run.eval_path))

    def gate() -> tuple[EvalSet, GateRows]:
        return read_gate_rows(run.run_dir, len(run.labels), _data_seed(run.metrics))

    return HeldOut(
        golden_texts=pick_texts(eval_set, golden_count),
        validation=(eval_set, validation),
        profile=(eval_set, SOURCE),
        gate=gate,
    )


def _data_seed(metrics: Mapping[str, Any]) -> int | None:
    """The data seed that drew the run's splits (metrics.json ``seeds.data``), if recorded."""
    seeds = metrics.get("seeds")
    seed = seeds.get("data") if isinstance(seeds, Mapping) else None
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None
