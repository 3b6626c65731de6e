"""A cascade served with --long-text windows: a text within its members' max_len is one window
answered as ever, with its window; a text that needs several windows is refused, naming why
(the student's confidence over one text decides which member answers)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from attnserve.service.client import Client, ClientError
from tests.support.cascades import NAME, export_duo
from tests.support.servers import RunningServer, make_settings

SHORT = "the red car is on the left of the blue car"


def test_a_cascade_reads_a_fitting_text_and_refuses_several_windows(
    trained_run: Callable[[str], Path], tmp_path: Path
) -> None:
    export_duo(trained_run, tmp_path)
    long = " ".join([SHORT] * 20)  # past either member's max_len
    with (
        RunningServer(make_settings(tmp_path, long_text="windows")) as server,
        Client(server.target) as client,
    ):
        result = client.classify(SHORT, model=NAME).results[0]
        assert result.answered_by in ("student", "teacher")
        assert [(w.start, w.end, w.weight) for w in result.windows] == [(0, len(SHORT), 1.0)]
        with pytest.raises(ClientError) as refused:
            client.classify(long, model=NAME)
    assert refused.value.code.name == "INVALID_ARGUMENT"
    assert "is a cascade, which reads each text within its members' max_len" in refused.value.details
