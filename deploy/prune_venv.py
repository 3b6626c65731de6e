"""Print the distributions of this environment that only the named ones need, the named ones
included: what `pip uninstall` may remove without breaking anything else installed.

    python prune_venv.py ROOT DROP...

ROOT is the distribution the environment exists for (attnserve); DROP names dependencies it
pulls in but never uses (tokenizers requires huggingface_hub for Tokenizer.from_pretrained,
which the server never calls). A requirement that holds only under an extra is not followed;
every other one is, whatever its environment marker says, so nothing needed is ever printed.
Run with the environment's own interpreter; standard library only.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import PackageNotFoundError, distribution, distributions


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(name: str) -> set[str]:
    try:
        requires = distribution(name).requires or []
    except PackageNotFoundError:
        return set()
    found = set()
    for requirement in requires:
        if re.search(r"""extra\s*==""", requirement.partition(";")[2]):
            continue
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
        if match:
            found.add(canonical(match.group(1)))
    return found


def needed(root: str, dropped: set[str]) -> set[str]:
    keep: set[str] = set()
    pending = [canonical(root)]
    while pending:
        name = pending.pop()
        if name in keep or name in dropped:
            continue
        keep.add(name)
        pending.extend(requirements(name))
    return keep


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: prune_venv.py ROOT DROP...", file=sys.stderr)
        return 2
    root, dropped = argv[0], {canonical(name) for name in argv[1:]}
    installed = {canonical(d.metadata["Name"]) for d in distributions()}
    print("\n".join(sorted(installed - needed(root, dropped))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
