"""Copy a run's tables and PNGs into the docs: docs/results/serving.md (between its markers),
the plots to docs/img/, and the server profile (when the run made one) to docs/profile/."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.publish import write_between
from bench.serving.report import PLOTS, render
from bench.serving.results import Results

BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"
PAGE = Path("results") / "serving.md"
PREFIX = "bench_"
PROFILE_FILES = ("profile.md", "profile.svg", "profile.txt")


def publish(results: Results, run_dir: Path, docs: Path, saturation: int) -> Path:
    """Replace the generated part of `docs/results/serving.md` with this run's report."""
    (docs / "img").mkdir(parents=True, exist_ok=True)
    for name in PLOTS:
        shutil.copyfile(run_dir / name, docs / "img" / f"{PREFIX}{name}")
    profiles = [run_dir / name for name in PROFILE_FILES if (run_dir / name).is_file()]
    if profiles:
        (docs / "profile").mkdir(exist_ok=True)
        for path in profiles:
            shutil.copyfile(path, docs / "profile" / f"server-under-load{path.suffix}")
    body = render(results, saturation, images=f"../img/{PREFIX}")
    demoted = "\n".join("#" + line if line.startswith("#") else line for line in body.splitlines())
    return write_between(docs / PAGE, BEGIN, END, demoted, "Serving suite: latest published run")
