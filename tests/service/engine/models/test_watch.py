"""`attnserve-serve` with its default settings watches the repository: a model or version
exported while it serves is classified without a restart."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from attnserve.service.client import Client, ClientError
from attnserve.service.settings import Settings
from tests.support.process import ServerProcess


def _wait_for(check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except ClientError:
            pass
        assert time.monotonic() < deadline, f"not seen within {seconds:.0f} s"
        time.sleep(0.2)


@pytest.mark.slow
def test_export_then_classify_without_a_restart(model_repository: Path, repository: Path) -> None:
    from attnserve.export.writer import export_run

    poll = Settings.model_fields["repository_poll_seconds"].default
    assert poll > 0, "the server must watch its repository by default"
    runs = model_repository.parent / "runs"
    with ServerProcess(repository, "--default-model", "car") as server, Client(server.target) as client:
        assert {info.name for info in client.models()} == {"car", "pool"}
        export_run(runs / "bow", repository, "second")  # a new model, as attnserve-export writes it
        export_run(runs / "pool", repository, "car")  # a new version of a served model: car/2

        def both_seen() -> bool:
            return client.classify("a white car", model="second").model == "second" and (
                client.model("car").version == 2
            )

        _wait_for(both_seen, 10 * poll + 10)
        reply = client.classify("the white car is left of the black car")  # the default model, now v2
        assert (reply.model, reply.version) == ("car", 2)
        assert client.health("second") == "SERVING"
        assert "model second version 1 loaded" in server.output
