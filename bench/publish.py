"""Publishing a run into the docs: a generated block between two markers of a results page.

The text outside the markers is written by hand and kept; a page or markers that are missing
are created, the page with a title, so a first `--publish` needs no preparation.
"""

from __future__ import annotations

from pathlib import Path


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
