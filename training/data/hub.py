"""Hugging Face Hub datasets, failing fast when the Hub cannot be reached.

``datasets.load_dataset`` retries an unreachable Hub five times with back-off (about 25 s)
before it gives up. Here the local cache is tried first with the Hub switched off, and only
when that misses is the Hub probed once, with a short timeout, before the real download.
"""

from __future__ import annotations

import contextlib
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from attnserve.training.data.core import DataError

PROBE_TIMEOUT_S = 3.0
_TRUE = {"1", "ON", "YES", "TRUE"}


def offline_by_setting() -> bool:
    """Whether the environment asks for offline mode (HF_HUB_OFFLINE or HF_DATASETS_OFFLINE)."""
    return any(
        os.environ.get(name, "").upper() in _TRUE for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def how_to_provide(name: str) -> str:
    return (
        f'download it where there is network (python -c "import datasets; '
        f"datasets.load_dataset('{name}').save_to_disk('{name.replace('/', '_')}')\") and pass that "
        "folder, or pass a local CSV/JSONL/Parquet file"
    )


def hub_reachable(name: str, timeout: float = PROBE_TIMEOUT_S, *, kind: str = "datasets") -> str | None:
    """None if the Hub answers for ``name`` (a data set, or with ``kind="models"`` a model)
    within ``timeout``; else why not, in words."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(f"{endpoint}/api/{kind}/{name}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError as exc:
        # The Hub answered: a 401/404 is load_dataset's to explain (private or misspelt name).
        return None if exc.code < 500 else f"the Hub answered HTTP {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"cannot reach {endpoint} ({reason})"


@contextlib.contextmanager
def _offline(hf: Any) -> Iterator[None]:
    """Switch the Hub off for this process while loading from the cache (no request leaves)."""
    from huggingface_hub import constants

    saved = (hf.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE)
    hf.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        hf.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def load_from_hub(
    hf: Any, name: str, config_name: str | None, split: str, cache_dir: str | None, probe_timeout: float
) -> Any:
    """One split of a Hub dataset: from the local cache if there, else downloaded."""
    try:
        with _offline(hf):
            return hf.load_dataset(name, config_name, split=split, cache_dir=cache_dir)
    except Exception as exc:
        cached_error: Exception = exc
    if offline_by_setting() or hf.config.HF_HUB_OFFLINE:
        raise DataError(
            f"{name!r} is not a local file or folder nor in the Hugging Face cache, and loading it from "
            f"the Hugging Face Hub needs network access, which HF_HUB_OFFLINE switches off; "
            f"{how_to_provide(name)}"
        ) from cached_error
    unreachable = hub_reachable(name, probe_timeout)
    if unreachable is not None:
        raise DataError(
            f"{name!r} is not a local file or folder nor in the Hugging Face cache, and loading it from "
            f"the Hugging Face Hub needs network access: {unreachable}; {how_to_provide(name)}"
        ) from cached_error
    try:
        return hf.load_dataset(name, config_name, split=split, cache_dir=cache_dir)
    except Exception as exc:
        raise DataError(f"cannot load Hugging Face dataset {name!r}: {type(exc).__name__}: {exc}") from exc
