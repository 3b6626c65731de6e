"""The engine's two halves import one way: the request path (engine/request/) uses the model
lifecycle (engine/models/), and the lifecycle imports nothing of the request path nor of
what sits above both (engine/core.py, engine/admission.py).

Read from the source with `ast`, so an import inside a function, or a relative one, counts
as much as one at the top of a module.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[3] / "service"
MODELS = SERVICE / "engine" / "models"
ABOVE_MODELS = (
    "attnserve.service.engine.request",
    "attnserve.service.engine.core",
    "attnserve.service.engine.admission",
)


def module_name(path: Path, root: Path = SERVICE) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(("attnserve", "service", *parts))


def imported_modules(path: Path, name: str) -> set[str]:
    """Every module `path` (the module `name`) imports, relative imports made absolute; a
    `from package import module` counts both the package and `package.module`."""
    package = name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def upward_imports(folder: Path, root: Path = SERVICE) -> list[str]:
    """`file imports module` for each import of a module above the lifecycle (root: service/)."""
    bad = []
    for path in sorted(folder.rglob("*.py")):
        for module in sorted(imported_modules(path, module_name(path, root))):
            if any(module == above or module.startswith(above + ".") for above in ABOVE_MODELS):
                bad.append(f"{path.relative_to(root).as_posix()} imports {module}")
    return bad


def test_the_model_lifecycle_imports_nothing_of_the_request_path() -> None:
    assert len(list(MODELS.rglob("*.py"))) > 3
    assert upward_imports(MODELS) == []


def test_the_request_path_uses_the_lifecycle() -> None:
    """The one way is request -> models (the predictor is built from a loaded version)."""
    predictor = SERVICE / "engine" / "request" / "predictor.py"
    assert "attnserve.service.engine.models.loading" in imported_modules(predictor, module_name(predictor))


def test_the_check_sees_an_upward_import_of_every_form(tmp_path: Path) -> None:
    folder = tmp_path / "service" / "engine" / "models"
    folder.mkdir(parents=True)
    forms = [
        "from attnserve.service.engine.request.batcher import Batcher\n",
        "def f():\n    import attnserve.service.engine.request.runner\n",
        "from ..request import queue\n",
        "from .. import core\n",
    ]
    for number, text in enumerate(forms):
        (folder / f"bad{number}.py").write_text(text)
    fine = "from ..metrics import Metrics\nfrom .tokenization import TextTokenizer\n"
    (folder / "fine.py").write_text(fine)
    found = upward_imports(folder, tmp_path / "service")
    assert {line.split(" imports ")[0] for line in found} == {f"engine/models/bad{n}.py" for n in range(4)}
