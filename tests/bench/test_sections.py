"""The `python -m bench` command itself: its sections, what --tiny stands for, its errors."""

from __future__ import annotations

import importlib

import pytest

from bench.cli import main
from bench.sections import BY_NAME, SECTIONS, SERVING_SECTIONS, expand_tiny


def test_every_section_names_a_main_and_a_tiny_size() -> None:
    for section in SECTIONS:
        module = importlib.import_module(section.module)
        assert callable(module.main), section.name
        assert section.tiny, f"{section.name} has no --tiny flags"
    assert {"peers", "inprocess", "http", "training-speed", "training-memory", "ensemble"} <= set(BY_NAME)


def test_tiny_stands_for_the_sections_flags_and_later_flags_win() -> None:
    section = BY_NAME["inprocess"]
    assert expand_tiny(section, ["--model", "m", "--tiny", "--calls", "5"]) == [
        *section.tiny, "--model", "m", "--calls", "5",
    ]  # fmt: skip
    assert expand_tiny(section, ["--calls", "5"]) == ["--calls", "5"]


def test_list_names_every_section_and_suite_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(section.name in out for section in SECTIONS)
    assert all(name in out for name in SERVING_SECTIONS)


def test_an_unknown_suite_section_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--tiny", "--sections", "ceiling,warp"])
    assert exit_info.value.code == 2
    assert "--sections: unknown warp" in capsys.readouterr().err


def test_a_sections_bad_flag_is_its_own_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["training-speed", "--tiny", "--rounds", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m bench training-speed") and "--rounds must be at least 1" in err
