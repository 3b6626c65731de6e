"""The one way every section writes what it measured: numbers, markdown tables, a results
page's generated part between two markers, its images, and matplotlib figures."""

from __future__ import annotations

import math
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kit.results import Point

PREFIX = "bench_"  # of the plots' names in DOCS/img/


def num(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or math.isnan(a) or math.isnan(b) or b == 0:
        return "n/a"
    return f"{a / b:.2f}x"


def log_point(point: Point, *setup: str) -> Point:
    """A measured point as one line on stderr: its system, the `setup` fields named, its figures."""
    fields = " ".join(f"{name}={getattr(point, name)}" for name in setup)
    cpu = "" if math.isnan(point.cpu_ms_per_call) else f"  cpu {point.cpu_ms_per_call:.3f} ms/call"
    if point.cpu_ms_per_call_no_model is not None:
        cpu += f" ({point.cpu_ms_per_call_no_model:.3f} w/o model)"
    print(f"  {point.system:<28} {fields}  {point.texts_per_s:8.0f} texts/s  {point.rps:8.0f} calls/s  "
          f"p50 {point.p50_ms:7.2f} ms  p99 {point.p99_ms:7.2f} ms  errors {point.error_share:.1%}{cpu}",
          file=sys.stderr, flush=True)  # fmt: skip
    return point


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]], align: str = "") -> list[str]:
    """A markdown table; `align` has an l, r or c per column (default: the first l, the rest r)."""
    align = align or "l" + "r" * (len(header) - 1)
    rules = [{"l": "---", "r": "---:", "c": ":-:"}[a] for a in align]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(rules) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def write_between(
    page: Path, begin: str, end: str, body: str, title: str, images: dict[Path, str] | None = None
) -> Path:
    """Replace what lies between `begin` and `end` in `page` with `body`, keeping the hand-written
    text around it (a missing page or missing markers are created); each of `images` is copied to
    img/ beside the page's folder under its published name."""
    for source, name in (images or {}).items():
        (page.parent.parent / "img").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, page.parent.parent / "img" / name)
    text = page.read_text() if page.is_file() else f"# {title}\n"
    block = f"{begin}\n{body.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    return page


def figure(columns: int = 1, size: tuple[float, float] = (8, 4.2)) -> tuple[Any, Any]:
    """A matplotlib figure (Agg: no display) and its row of `columns` axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made, axes = plt.subplots(1, columns, figsize=size, squeeze=False)
    return made, axes[0]


def empty(axis: Any, what: str) -> None:
    """An axis that says its data was not measured."""
    axis.text(
        0.5, 0.5, f"{what}: not measured in this run", ha="center", va="center", transform=axis.transAxes
    )
    axis.set_xticks([])
    axis.set_yticks([])


def save(made: Any, path: Path) -> None:
    import matplotlib.pyplot as plt

    made.tight_layout()
    made.savefig(path, dpi=110)
    plt.close(made)
