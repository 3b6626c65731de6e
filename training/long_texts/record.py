"""A long-text run's `long_texts.json`: the policy chosen on validation, which
`attnserve-export RUN` writes into the bundle when no --long-texts flag is given."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from attnserve.service.bundle import LongTexts

LONG_TEXTS_FILE = "long_texts.json"


def write_policy(run_dir: Path, policy: LongTexts) -> Path:
    path = run_dir / LONG_TEXTS_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(policy.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def recorded_policy(run_dir: Path) -> LongTexts | None:
    """The run's policy; None for a run trained without --long-texts (no file)."""
    path = run_dir / LONG_TEXTS_FILE
    if not path.is_file():
        return None
    try:
        return LongTexts.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ValueError(f"{path} is not a long-text policy: {exc.errors()[0]['msg']}") from None
