"""Generate the Python protobuf modules in service/proto/ from every .proto under protos/.

    python -m attnserve.service.protogen            # regenerate service/proto/ in place
    python -m attnserve.service.protogen --check    # exit 1 if service/proto/ is out of date

Only message modules (`*_pb2.py` + `.pyi` stubs) are generated: gRPC handlers are
registered by hand (raw-bytes handlers, see service/api/grpc/handlers.py) so that a request body that
does not parse is answered INVALID_ARGUMENT instead of grpcio's UNKNOWN.

protoc sees protos/ under the virtual path `attnserve/service/proto` (the installed name of
service/proto/), so generated imports between files read
`from attnserve.service.proto.<package> import ..._pb2` and work without rewriting.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "protos"
VIRTUAL_PREFIX = Path("attnserve") / "service" / "proto"
TARGET = ROOT / "service" / "proto"


def proto_files(proto_dir: Path = PROTO_DIR) -> list[Path]:
    return sorted(proto_dir.rglob("*.proto"))


def generate(out_root: Path, proto_dir: Path = PROTO_DIR) -> list[Path]:
    """Run protoc for every .proto; files land in out_root/service/proto/. Returns them."""
    from grpc_tools import protoc  # dev-only dependency: imported only when generating

    sources = proto_files(proto_dir)
    if not sources:
        raise SystemExit(f"no .proto files under {proto_dir}")
    include = Path(protoc.__file__).parent / "_proto"  # well-known types (google/protobuf/*.proto)
    virtual = [str(VIRTUAL_PREFIX / path.relative_to(proto_dir)) for path in sources]
    args = [
        "grpc_tools.protoc",
        f"-I{VIRTUAL_PREFIX}={proto_dir}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        *virtual,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed (see the messages above)")
    package_root = out_root / VIRTUAL_PREFIX
    for directory in [package_root, *(p for p in package_root.rglob("*") if p.is_dir())]:
        if directory.name != "__pycache__":
            (directory / "__init__.py").touch()
    return sorted(p for p in package_root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _relative_files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def stale_files(current: Path = TARGET) -> list[str]:
    """Files in service/proto/ that differ from a fresh generation (empty when up to date)."""
    with tempfile.TemporaryDirectory() as temp:
        generate(Path(temp))
        fresh = Path(temp) / VIRTUAL_PREFIX
        fresh_files, current_files = _relative_files(fresh), _relative_files(current)
        differing = [
            str(rel)
            for rel in sorted(fresh_files | current_files)
            if rel not in fresh_files
            or rel not in current_files
            or not filecmp.cmp(fresh / rel, current / rel, shallow=False)
        ]
    return differing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m attnserve.service.protogen", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="only report whether service/proto/ is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        if stale:
            print(
                "service/proto/ is out of date; run `python -m attnserve.service.protogen`:",
                *stale,
                sep="\n  ",
            )
            return 1
        print("service/proto/ is up to date")
        return 0
    target = TARGET
    with tempfile.TemporaryDirectory() as temp:
        generate(Path(temp))
        # Replace the whole tree so modules of deleted .proto files do not linger.
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(Path(temp) / VIRTUAL_PREFIX, target)
    for path in sorted(_relative_files(target)):
        print(target.relative_to(ROOT) / path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
