"""Copy a run into the docs, one way for every report: its markdown between two markers of a
results page (the text outside them is written by hand and kept; a missing page or missing
markers are created, so a first `--publish` needs no preparation), its PNGs to docs/img/.

The serving suite: docs/results/serving.md, its plots, and the server profile (when the run
made one) to docs/profile/. The peer comparison: docs/results/peers.md and its plot.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.serving import peer_report
from bench.serving.report import PLOTS, render
from bench.serving.results import Results

BEGIN, END = "<!-- bench:results:begin -->", "<!-- bench:results:end -->"
PAGE = Path("results") / "serving.md"
PEERS_BEGIN, PEERS_END = "<!-- peers:begin -->", "<!-- peers:end -->"
PEERS_PAGE = Path("results") / "peers.md"
PREFIX = "bench_"
PROFILE_FILES = ("profile.md", "profile.svg", "profile.txt")


def write_between(page: Path, begin: str, end: str, body: str, title: str) -> Path:
    """Replace what lies between `begin` and `end` in `page` with `body`."""
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


def _images(docs: Path, pairs: dict[Path, str]) -> None:
    """Copy each run file to docs/img/ under its published name."""
    (docs / "img").mkdir(parents=True, exist_ok=True)
    for source, name in pairs.items():
        shutil.copyfile(source, docs / "img" / name)


def publish(results: Results, run_dir: Path, docs: Path, saturation: int) -> Path:
    """Replace the generated part of `docs/results/serving.md` with this run's report."""
    _images(docs, {run_dir / name: f"{PREFIX}{name}" for name in PLOTS})
    profiles = [run_dir / name for name in PROFILE_FILES if (run_dir / name).is_file()]
    if profiles:
        (docs / "profile").mkdir(exist_ok=True)
        for path in profiles:
            shutil.copyfile(path, docs / "profile" / f"server-under-load{path.suffix}")
    body = render(results, saturation, images=f"../img/{PREFIX}")
    demoted = "\n".join("#" + line if line.startswith("#") else line for line in body.splitlines())
    return write_between(docs / PAGE, BEGIN, END, demoted, "Serving suite: latest published run")


def publish_peers(
    results: peer_report.Results, run_dir: Path, docs: Path, before: peer_report.Results | None = None
) -> Path:
    """Replace the generated part of `docs/results/peers.md` with this run's report and plot."""
    text = peer_report.render(results, run_dir, before)
    _images(docs, {run_dir / "peers.png": f"{PREFIX}peers.png"})
    body = f"![peers](../img/{PREFIX}peers.png)\n\n{text}"
    title = "attnserve beside its peers: latest published run"
    return write_between(docs / PEERS_PAGE, PEERS_BEGIN, PEERS_END, body, title)
