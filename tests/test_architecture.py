"""docs/architecture.md's package list names every module of the stages, and only modules
that exist.

The list is the text block under "## Packages". A line whose first word ends in `/` and that
is indented by 0, 2 or 4 spaces opens a folder: a stage at 0 (`service/`), a package of the
stage at 2 (`  engine/`), a package of that at 4 (`    request/`); the lines after it, up
to the next folder, are that folder's. A module is listed when its file name appears on its
folder's lines outside parentheses (the parentheses say what a module does, and may name
other files). `__init__.py` files and the generated `service/proto/` are not listed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
STAGES = ("service", "export", "training")
GENERATED = ("service/proto/",)
FOLDER_INDENTS = (0, 2, 4)
MODULE = re.compile(r"(?<![\w<>./-])(\w+\.py)\b")
PARENTHESES = re.compile(r"\([^()]*\)")


def package_block(text: str) -> list[str]:
    """The lines of the first code block after the "## Packages" heading."""
    after = re.split(r"^## Packages$", text, maxsplit=1, flags=re.MULTILINE)[1]
    start = after.index("```")
    body = after[after.index("\n", start) + 1 :]
    return body[: body.index("```")].splitlines()


def folder_texts(lines: list[str]) -> Iterator[tuple[str, str]]:
    """(folder path as written, e.g. "service/engine/request/", text of its lines) per folder."""
    path: list[str] = []
    texts: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        stripped = line.lstrip(" ")
        indent = len(line) - len(stripped)
        first = stripped.split(" ", 1)[0]
        if first.endswith("/") and indent in FOLDER_INDENTS and indent // 2 <= len(path):
            path = [*path[: indent // 2], first]
            current = "".join(path)
            stripped = stripped[len(first) :]
        if current is not None:
            texts.setdefault(current, []).append(stripped)
    for folder, parts in texts.items():
        yield folder, " ".join(parts)


def listed_modules(text: str) -> set[str]:
    """Every module the package list names, as a path from the repository root."""
    listed: set[str] = set()
    for folder, words in folder_texts(package_block(text)):
        while PARENTHESES.search(words):  # innermost first: nested parentheses go too
            words = PARENTHESES.sub(" ", words)
        listed.update(folder + name for name in MODULE.findall(words))
    return listed


def stage_modules(stage: str) -> set[str]:
    found = set()
    for path in (ROOT / stage).rglob("*.py"):
        relative = path.relative_to(ROOT).as_posix()
        if path.name != "__init__.py" and not relative.startswith(GENERATED):
            found.add(relative)
    return found


def test_the_rule_reads_folders_nesting_and_parentheses() -> None:
    text = "\n".join(
        [
            "## Packages",
            "",
            "```text",
            "service/   settings.py  errors.py (ServiceError; not run.py)",
            "           server.py (lifecycle:",
            "           spans lines)  cli.py",
            "  engine/  core.py  <family>.py",
            "    request/  batcher.py + queue.py",
            "  grpc/    calls.py",
            "tests/     mirrors the packages",
            "```",
        ]
    )
    assert listed_modules(text) == {
        "service/settings.py",
        "service/errors.py",
        "service/server.py",
        "service/cli.py",
        "service/engine/core.py",
        "service/engine/request/batcher.py",
        "service/engine/request/queue.py",
        "service/grpc/calls.py",
    }


@pytest.mark.parametrize("stage", STAGES)
def test_every_module_is_in_the_package_list(stage: str) -> None:
    listed = listed_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    missing = sorted(stage_modules(stage) - listed)
    assert not missing, f"modules missing from docs/architecture.md's package list: {missing}"


@pytest.mark.parametrize("stage", STAGES)
def test_every_module_in_the_package_list_exists(stage: str) -> None:
    listed = listed_modules(ARCHITECTURE.read_text(encoding="utf-8"))
    stale = sorted(name for name in listed - stage_modules(stage) if name.startswith(f"{stage}/"))
    assert not stale, f"docs/architecture.md's package list names modules that do not exist: {stale}"


# The contract sections below the package list: families, run directory, bundle.


def section(heading: str) -> str:
    """The text under "## `heading`..." up to the next "## " heading."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    after = text[text.index(f"\n## {heading}") :]
    end = after.find("\n## ", 1)
    return after if end < 0 else after[:end]


def bullet(text: str, opening: str) -> str:
    """The bullet of `text` that starts with "- `opening`", its continuation lines joined."""
    start = text.index(f"- {opening}")
    end = text.find("\n- ", start + 1)
    return " ".join(text[start : None if end < 0 else end].split())


def ticked(text: str) -> list[str]:
    """The `backticked` items of `text`, in order."""
    return re.findall(r"`([^`]+)`", text)


def table(text: str) -> list[list[str]]:
    """The rows of the markdown table(s) in `text`, header and rule left out, cells stripped."""
    rows: list[list[str]] = []
    body = False
    for line in (line.strip() for line in text.splitlines()):
        if line.startswith("|---"):
            body = True
        elif not line.startswith("|"):
            body = False
        elif body:
            rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


MODELS = section("Model contract")


def test_the_family_files_are_the_registered_families() -> None:
    from attnserve.training.models import FAMILIES

    listed = bullet(MODELS, "One file per family")
    families = [name.removesuffix(".py") for name in ticked(listed.split("Each has")[0])]
    assert sorted(families) == sorted(FAMILIES), "the families listed are not the registry's"
    for family, cls in FAMILIES.items():
        assert cls.__module__.rsplit(".", 1)[1] == family, f"{cls.__name__} is not in {family}.py"
    shared = {
        name for sentence in listed.split(". ") if "are shared" in sentence for name in ticked(sentence)
    }
    files = {p.name for p in (ROOT / "training" / "models").glob("*.py")} - {"__init__.py"}
    assert files == {f"{family}.py" for family in FAMILIES} | shared, files


def test_the_attention_table_gives_each_family_its_kind_and_shape() -> None:
    import torch

    from attnserve.service.bundle import AttentionKind
    from attnserve.training.models import FAMILIES, build_model
    from tests.support.runs import TINY

    rows = {ticked(kind)[0]: (shape.strip("`"), ticked(families)) for kind, shape, families in table(MODELS)}
    assert sorted(rows) == sorted(kind.value for kind in AttentionKind), "kinds other than the bundle's"
    listed = [family for _, families in rows.values() for family in families]
    assert sorted(listed) == sorted(FAMILIES), "each family is in the table once"
    for kind, (shape, families) in rows.items():
        for family in families:
            cls = FAMILIES[family]
            assert cls.attention_kind == kind, (family, cls.attention_kind, kind)
            if family not in TINY:  # the pretrained encoder needs a Hugging Face config: its kind says it
                continue
            model = build_model(family, {"vocab_size": 20, **TINY[family]}).eval()
            ids = torch.tensor([[2, 3, 4, 5, 0], [3, 4, 0, 0, 0]])
            _, attention = model(ids, (ids != 0).long())
            if shape == "None":
                assert attention is None, family
            else:
                assert attention is not None and attention.dim() == shape.count(",") + 1, (family, shape)
                assert (attention.shape[0], attention.shape[-1]) == (2, 5), (family, attention.shape)


def _fields(text: str) -> list[tuple[str, str, str]]:
    """(name, type, default or "") of each `name: type = default` in `text`."""
    return [
        (found.group(1), found.group(2), found.group(3) or "")
        for found in re.finditer(r"`(\w+): (\w+)(?: = ([^`]+))?`", text)
    ]


def test_the_config_fields_are_the_dataclasses_fields() -> None:
    from attnserve.training.models.config import HEADS, POSITIONS, ModelConfig, SequenceConfig
    from attnserve.training.models.encoder import ENCODER_HEADS

    def declared(cls: typing.Any, skip: set[str]) -> list[tuple[str, str, str]]:
        return [
            (f.name, str(f.type), "" if f.default is dataclasses.MISSING else repr(f.default))
            for f in dataclasses.fields(cls)
            if f.name not in skip
        ]

    common = bullet(MODELS, "Common config fields")
    sequence = bullet(MODELS, "Sequence config fields")
    base = {f.name for f in dataclasses.fields(ModelConfig)}
    assert _fields(common) == [(n, t, d.replace("'", '"')) for n, t, d in declared(ModelConfig, set())]
    assert _fields(sequence) == [(n, t, d.replace("'", '"')) for n, t, d in declared(SequenceConfig, base)]
    heads, encoder_heads = common.split("heads ")[1].split("(the encoder's own:")
    assert tuple(ticked(heads)) == HEADS and tuple(ticked(encoder_heads)) == ENCODER_HEADS
    assert tuple(ticked(sequence.split("positions ")[-1])) == POSITIONS


RUN = section("Run directory")


def _run_files() -> tuple[dict[str, str], dict[str, str]]:
    """(file -> content) for the files of every run, and for those written only sometimes."""
    always: dict[str, str] = {}
    sometimes: dict[str, str] = {}
    for names, content in table(RUN):
        for name in ticked(names):
            (sometimes if content.startswith("only") else always)[name] = content
    return always, sometimes


def test_a_run_directory_holds_the_files_listed(trained_run: Callable[[str], Path]) -> None:
    from attnserve.training.cli.compare import COMMAND_RECORD
    from attnserve.training.loop.resume import RESUME

    always, sometimes = _run_files()
    run = trained_run("mean_pool")
    assert sorted(p.name for p in run.iterdir()) == sorted(always)
    assert sorted(sometimes) == sorted([RESUME, COMMAND_RECORD])


def test_the_checkpoint_and_metrics_hold_the_keys_listed(trained_run: Callable[[str], Path]) -> None:
    import torch

    from attnserve.training.run.checkpoint import CHECKPOINT, FORMAT, METRICS, LoadedRun

    always, _ = _run_files()
    run = trained_run("mean_pool")
    saved = torch.load(run / CHECKPOINT, map_location="cpu", weights_only=True)
    assert sorted(re.findall(r'"(\w+)"', always[CHECKPOINT])) == sorted(saved)
    assert f'"format": "{FORMAT}"' in always[CHECKPOINT]
    metrics = json.loads((run / METRICS).read_text())
    named = re.findall(r'"(\w+)"', always[METRICS].split(";")[0])
    assert named and set(named) <= set(metrics), sorted(set(named) - set(metrics))
    loaded = re.search(r"LoadedRun\(([^)]*)\)", RUN)
    assert loaded is not None
    assert loaded.group(1).split(", ") == [f.name for f in dataclasses.fields(LoadedRun)]


BUNDLE = section("Bundle")


def test_the_manifest_fields_are_the_ones_listed() -> None:
    from attnserve.service.bundle import AttentionSpec, BundleManifest, TensorSpec

    listed = BUNDLE[BUNDLE.index("`bundle.json` fields:") :].split("\n\n")[0]
    top = listed.split(":", 1)[1]
    while PARENTHESES.search(top):
        top = PARENTHESES.sub(" ", top)
    assert ticked(top) == list(BundleManifest.model_fields)
    attention = re.search(r"`attention` \(([^)]*)\)", listed)
    tensors = re.search(r"`outputs` \(([^)]*)\)", listed)
    assert attention is not None and tensors is not None
    assert ticked(attention.group(1)) == list(AttentionSpec.model_fields)
    assert ticked(tensors.group(1)) == list(TensorSpec.model_fields)


def test_a_bundle_holds_the_files_and_io_listed(exported_bundle: Callable[[str], Path]) -> None:
    from attnserve.service.bundle import MANIFEST_FILE, REQUIRED_FILES, STAGING_PREFIX, read_bundle

    layout = re.search(r"`models/<name>/<version>/\{([^}]*)\}`", BUNDLE)
    assert layout is not None
    files = layout.group(1).split(", ")
    assert sorted(files) == sorted([*REQUIRED_FILES, MANIFEST_FILE])
    assert f"`{STAGING_PREFIX}*`" in BUNDLE
    bundle = exported_bundle("mean_pool")
    assert sorted(p.name for p in bundle.iterdir()) == sorted(files)
    io = " ".join(BUNDLE[BUNDLE.index("ONNX I/O:") :].split())
    manifest = read_bundle(bundle).manifest
    for spec in (*manifest.inputs, *manifest.outputs):
        dims = ", ".join("classes" if isinstance(d, int) else d for d in spec.shape)
        assert f"`{spec.name}` {spec.dtype} `[{dims}]`" in io or (
            spec.name == "attention" and f"`attention` {spec.dtype}" in io
        ), spec
