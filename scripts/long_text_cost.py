"""What a long document costs a server: per length, read as windows, cut, and as separate texts.

    .venv/bin/python scripts/long_text_cost.py --bundle models/sst2-sentiment/2 \\
        --sst2 /work/shared/data/sst2 --out /tmp/long-cost.json

Copies `--bundle` into a scratch repository with the server's default windows for its max_len,
allowing 64 windows (the default allows 16), in its manifest's long-text policy; starts
`attnserve-serve --workers 1 --long-text windows` on 127.0.0.1 and, per length (1, 4, 16 and 64
windows; documents of dev.csv sentences joined until the bundle's tokenizer cuts exactly that
many windows), sends single-document calls one after another (`--rows` windows' worth in all,
at least 30 calls) three ways: the document read as windows, the same document cut at max_len
(`long_text: truncate`), and its windows' texts (the characters each window covers) as that
many texts in one call. Reported per way: documents per second, milliseconds per call (p50) and
the server's CPU seconds per call from /proc, and the server's peak resident memory (VmHWM)
after the 64-window calls. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from attnserve.service.bundle import LongTexts
from attnserve.service.bundle.manifest import write_manifest
from attnserve.service.bundle.reader import read_manifest
from attnserve.service.client import Client
from attnserve.training.document.windows import load_window_model

LENGTHS = (1, 4, 16, 64)


def documents(bundle: Path, sst2: Path, policy: LongTexts) -> dict[int, str]:
    """Per length a text of dev.csv sentences that the bundle's tokenizer cuts into that many windows."""
    tokenizer = load_window_model(bundle).tokenizer(policy)
    with open(sst2 / "dev.csv", newline="", encoding="utf-8") as handle:
        sentences = [row["sentence"] for row in csv.DictReader(handle)]
    out: dict[int, str] = {}
    text, index = "", 0
    for length in LENGTHS:
        while True:
            count = len(tokenizer.encode_windows([text])[0][0]) if text else 0
            if count == length:
                break
            text = f"{text} {sentences[index]}".strip() if count < length else text.rsplit(" ", 1)[0]
            index += 1 if count < length else 0
        out[length] = text
    return out


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(client: Client, pid: int, calls: int, send: Any) -> dict[str, float]:
    send()  # warm: the first call of a shape pays onnxruntime's set-up
    cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
    each = []
    for _ in range(calls):
        start = time.perf_counter()
        send()
        each.append(time.perf_counter() - start)
    wall = time.perf_counter() - wall0
    each.sort()
    return {
        "docs_per_s": calls / wall,
        "p50_ms": 1000 * each[len(each) // 2],
        "server_cpu_ms_per_call": 1000 * (cpu_seconds(pid) - cpu0) / calls,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bundle", type=Path, required=True, help="a bundle version folder (the window model)"
    )
    parser.add_argument("--sst2", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=4000, help="windows sent per length and way")
    parser.add_argument("--port", type=int, default=50571)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="long-cost-"))
    manifest = read_manifest(args.bundle)
    name = manifest.name
    version = scratch / name / str(manifest.version)  # folders named as the manifest names them
    shutil.copytree(args.bundle, version)
    # The server's default windows for this max_len, allowing 64 (the default allows 16).
    policy = LongTexts.default(manifest.max_len).model_copy(update={"max_windows": max(LENGTHS)})
    write_manifest(version, manifest.model_copy(update={"long_texts": policy}))
    docs = documents(version, args.sst2, policy)
    serve = str(Path(sys.executable).parent / "attnserve-serve")
    command = [serve, "--repository", str(scratch), "--port", str(args.port), "--metrics-port", "0",
               "--http-port", "0", "--workers", "1", "--long-text", "windows",
               "--max-text-chars", "100000"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results: dict[str, Any] = {"policy": policy.model_dump(), "rows": args.rows, "lengths": {}}
    try:
        client = Client(f"127.0.0.1:{args.port}", timeout=60)
        for _ in range(100):
            try:
                client.models()
                break
            except Exception:  # not listening yet
                time.sleep(0.2)
        results["rss_mb_before"] = peak_rss_mb(server.pid)
        for length, text in docs.items():
            reply = client.classify(text, model=name, long_text="windows").results[0]
            spans = [text[w.start : w.end] for w in reply.windows] or [text]
            calls = max(30, args.rows // length)
            rows = {
                "words": len(text.split()),
                "window_count": len(reply.windows) or 1,
                "windows": timed(client, server.pid, calls,
                                 lambda t=text: client.classify(t, model=name, long_text="windows")),
                "truncate": timed(client, server.pid, calls,
                                  lambda t=text: client.classify(t, model=name, long_text="truncate")),
                "as_texts": timed(client, server.pid, calls,
                                  lambda s=spans: client.classify(s, model=name, long_text="truncate")),
            }  # fmt: skip
            rows["cost_ratio_windows_to_texts"] = (
                rows["windows"]["server_cpu_ms_per_call"] / rows["as_texts"]["server_cpu_ms_per_call"]
            )
            results["lengths"][length] = rows
            print(length, json.dumps(rows), flush=True)
        results["rss_mb_peak"] = peak_rss_mb(server.pid)
        client.close()
    finally:
        server.terminate()
        server.wait(10)
    args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
