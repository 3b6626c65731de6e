"""Hand-written evaluation sentences shipped with the package, one TSV file per task.

A task may also have a blind set (``<task>_blind.tsv``): sentences written in one sitting and
never looked at while the grammar changed, where the first set has become a development set.
Each file holds ``label<TAB>text`` rows; blank lines and lines starting with ``#`` are
comments. The sentences were written by hand, apart from the generators, so that accuracy on
them measures how a model reads sentences that no grammar of ours produced. They are never
trained on.
"""

from __future__ import annotations

from importlib import resources

from attnserve.training.data.core import DataError, Example


def _file_name(task: str, blind: bool) -> str:
    return task.replace("-", "_") + ("_blind" if blind else "") + ".tsv"


def load(task: str, labels: tuple[str, ...], *, blind: bool = False) -> list[Example]:
    """The hand-written examples of ``task`` (its blind set with ``blind``), labels as ids in ``labels``."""
    name = _file_name(task, blind)
    source = resources.files(__name__).joinpath(name)
    if not source.is_file():
        raise DataError(f"no hand-written sentences for task {task!r} ({name} is not in the package)")
    return parse(source.read_text(encoding="utf-8"), name, labels)


def parse(content: str, name: str, labels: tuple[str, ...]) -> list[Example]:
    """Rows of ``label<TAB>text``; each example's group is its line number."""
    examples: list[Example] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(content.splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        label, sep, text = line.partition("\t")
        text = text.strip()
        if not sep or not text:
            raise DataError(f"{name} line {number}: expected 'label<TAB>text', got {line!r}")
        if label not in labels:
            raise DataError(f"{name} line {number}: label {label!r} is not one of {', '.join(labels)}")
        if text.lower() in seen:
            raise DataError(f"{name} line {number}: the same sentence as line {seen[text.lower()]}")
        seen[text.lower()] = number
        examples.append(Example(text, labels.index(label), group=number))
    if not examples:
        raise DataError(f"{name} holds no sentences")
    return examples
