"""Shared, expensive fixtures: one tiny trained run and one exported bundle per model family.

Runs are trained through the real training entry point on the built-in greetings-food task,
small enough to take about a second each; bundles are exported through the real writer.
Both are session-scoped and built on first use. Tests that alter a bundle copy it first.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run

# Small models; attention_pool gets a max_len other than 64 so the parity grid covers both.
TINY: dict[str, dict[str, Any]] = {
    "mean_pool": {"d_model": 8, "positions": "learned"},
    "attention_pool": {"d_model": 8, "max_len": 40},
    "self_attention": {"d_model": 8, "qk_dim": 4},
    "transformer": {"d_model": 8, "n_layers": 2, "n_heads": 2},
    "bow_mlp": {"hidden": 8},
    "conv_attention": {"d_model": 8, "n_queries": 2, "conv_layers": 2},
    "gru_attention": {"d_model": 8, "n_queries": 2},
}
FAMILIES = sorted(TINY)
ATTENTION_FAMILIES = [family for family in FAMILIES if family != "bow_mlp"]


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``trained_run(family)`` -> the run directory of a tiny model trained for two epochs."""
    root = tmp_path_factory.mktemp("runs")
    cache: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in cache:
            with torch_threads(1):  # tiny models: extra threads only add contention
                result = train_run(
                    root / family,
                    family,
                    TINY[family],
                    TrainConfig(epochs=2, batch_size=32, progress=False, seed=0),
                    DataSpec(task="greetings-food", n_pairs=60, seed=0),
                )
            cache[family] = result.run_dir
        return cache[family]

    return get


@pytest.fixture(scope="session")
def exported_bundle(
    trained_run: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], Path]:
    """``exported_bundle(family)`` -> version 1 of a float bundle; read it, never modify it."""
    repository = tmp_path_factory.mktemp("shared-repository")
    cache: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in cache:
            cache[family] = export_run(trained_run(family), repository, family)
        return cache[family]

    return get


@pytest.fixture
def bundle_copy(exported_bundle: Callable[[str], Path], tmp_path: Path) -> Callable[[str], Path]:
    """``bundle_copy(family)`` -> a private copy of the family's bundle that a test may damage."""

    def get(family: str) -> Path:
        target = tmp_path / "repository" / family / "1"
        shutil.copytree(exported_bundle(family), target)
        return target

    return get
