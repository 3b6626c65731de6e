"""Copy a run's tables and PNGs into the docs: docs/benchmarks.md (between its markers), the
plots to docs/img/, and the server profile (when the run made one) to docs/profile/."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.report import PLOTS, render
from bench.results import Results

BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"
PREFIX = "bench_"
PROFILE_FILES = ("profile.md", "profile.svg", "profile.txt")


def publish(results: Results, run_dir: Path, docs: Path, saturation: int) -> Path:
    """Replace the text between the markers of `docs/benchmarks.md` with this run's report."""
    page = docs / "benchmarks.md"
    text = page.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{page} lacks the {BEGIN} / {END} markers that delimit the generated results")
    (docs / "img").mkdir(exist_ok=True)
    for name in PLOTS:
        shutil.copyfile(run_dir / name, docs / "img" / f"{PREFIX}{name}")
    profiles = [run_dir / name for name in PROFILE_FILES if (run_dir / name).is_file()]
    if profiles:
        (docs / "profile").mkdir(exist_ok=True)
        for path in profiles:
            shutil.copyfile(path, docs / "profile" / f"server-under-load{path.suffix}")
    body = render(results, saturation, images=f"img/{PREFIX}")
    demoted = "\n".join("#" + line if line.startswith("#") else line for line in body.splitlines())
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    page.write_text(f"{head}{BEGIN}\n{demoted}\n{END}{tail}")
    return page
