"""Settings: defaults < ATTNSERVE_* environment < command-line flags; every setting documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from attnserve.service.settings import Settings, build_parser, load_settings
from tests.support.servers import plain_settings


def test_environment_overrides_defaults_and_flags_override_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTNSERVE_MAX_BATCH_SIZE", "8")
    monkeypatch.setenv("ATTNSERVE_PORT", "6000")
    monkeypatch.setenv("ATTNSERVE_REFLECTION", "false")
    settings = load_settings(["--port", "7000", "--repository", "elsewhere", "--device", "auto"])
    assert settings.port == 7000  # flag beats environment
    assert settings.max_batch_size == 8  # environment beats default
    assert settings.reflection is False
    assert settings.repository == Path("elsewhere") and settings.device == "auto"
    assert settings.metrics_port == 9100  # default


def test_long_text_flags() -> None:
    assert load_settings([]).long_text == "truncate"
    assert load_settings(["--reject-long"]).long_text == "reject"
    assert load_settings(["--reject-long", "--truncate"]).long_text == "truncate"
    assert load_settings(["--no-metrics"]).metrics is False


def test_invalid_values_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit):
        load_settings(["--device", "tpu"])
    with pytest.raises(ValidationError, match="max_texts_per_request"):
        plain_settings(max_queue=10, max_texts_per_request=20)
    with pytest.raises(ValidationError, match="fixed port"):
        plain_settings(workers=2, port=0)
    monkeypatch.setenv("ATTNSERVE_NOT_A_SETTING", "1")  # unrelated variables are ignored
    assert plain_settings().port == 50051


def test_every_setting_has_a_flag_and_a_description() -> None:
    help_text = build_parser().format_help()
    for name, field in Settings.model_fields.items():
        assert field.description, f"{name} is undocumented"
        assert "--" + name.replace("_", "-") in help_text
    for flag in (
        "--truncate",
        "--reject-long",
        "--intra-op-threads",
        "--graph-optimization",
        "--grace-seconds",
    ):
        assert flag in help_text


def test_every_setting_is_documented_in_the_service_guide() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    for name in Settings.model_fields:
        assert f"`ATTNSERVE_{name.upper()}`" in guide, f"docs/service.md lacks {name}"


def test_http_port_defaults_to_8000_and_must_differ_from_the_grpc_port() -> None:
    assert Settings.model_fields["http_port"].default == 8000  # the environment of tests sets 0
    with pytest.raises(ValueError, match="http_port and port must differ"):
        plain_settings(port=9000, http_port=9000)
    assert plain_settings(port=9000, http_port=0).http_port == 0  # off


def test_the_attribution_cap_follows_a_smaller_queue_unless_set_above_it() -> None:
    assert plain_settings(repository=Path("m")).attribution_rows == 512
    small = plain_settings(repository=Path("m"), max_queue=32, max_texts_per_request=4)
    assert small.max_attribution_rows == 512 and small.attribution_rows == 32
    with pytest.raises(ValidationError, match=r"max_attribution_rows \(100\) cannot exceed max_queue \(32\)"):
        plain_settings(repository=Path("m"), max_queue=32, max_texts_per_request=4, max_attribution_rows=100)
    flag = load_settings(["--repository", "m", "--max-queue", "32", "--max-texts-per-request", "4"])
    assert flag.attribution_rows == 32
