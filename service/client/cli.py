"""`attnserve-client`: classify, explain, list models, check health, and (with an admin
token) reload or unload models, over plaintext, TLS or mutual TLS.

The bearer token is read from `--token` or, better (a flag shows in `ps`), from the
ATTNSERVE_TOKEN environment variable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attnserve.service.client.channels import Security

TOKEN_ENV = "ATTNSERVE_TOKEN"


def _heat(weight: float, peak: float) -> str:
    level = 0.0 if peak <= 0 else min(1.0, weight / peak)
    red, green, blue = 255, int(255 - 150 * level), int(255 - 255 * level)
    return f"black on rgb({red},{green},{blue})"


def _print_classification(reply: Any, texts: Sequence[str], labels: Sequence[str]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from attnserve.service.engine.attention import importance

    console = Console()
    for text, result in zip(texts, reply.results, strict=True):
        table = Table(
            title=text if len(text) <= 100 else text[:97] + "...", title_justify="left", show_edge=False
        )
        table.add_column("label")
        table.add_column("probability", justify="right")
        for label_id in np.argsort(-result.probabilities):
            name = labels[label_id]
            shown = f"[bold]{name}[/bold]" if label_id == result.label_id else name
            table.add_row(shown, f"{result.probabilities[label_id]:.4f}")
        console.print(table)
        if result.attention is not None:
            weights = importance(result.attention)
            line = Text()
            for token, weight in zip(result.tokens, weights.tolist(), strict=True):
                line.append(f" {token} ", style=_heat(weight, float(weights.max())))
                line.append(" ")
            console.print(line)
        if result.top_tokens:
            console.print(
                "top tokens: " + ", ".join(f"{t.token} ({t.weight:.3f})" for t in result.top_tokens)
            )
        if result.truncated:
            console.print("[yellow]truncated to the model's max_len[/yellow]")
    console.print(f"[dim]{reply.model} v{reply.version}; server time {reply.timings_us}[/dim]")


def _explain(client: Any, args: argparse.Namespace) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "attnserve-client explain needs matplotlib, which this installation lacks: "
            "pip install matplotlib (or attnserve[train])",
            file=sys.stderr,
        )
        return 2
    info = client.model(args.model, args.version)
    mode = "all" if info.attention_kind in ("self", "layers") else "pooled"
    if info.attention_kind == "none":
        print(f"model {info.name!r} has no attention weights to explain", file=sys.stderr)
        return 1
    reply = client.classify([args.text], model=args.model, version=args.version, attention=mode)
    result = reply.results[0]
    tokens, weights = result.tokens, result.attention
    if weights.ndim == 1:
        figure, axis = plt.subplots(figsize=(max(4, 0.5 * len(tokens)), 2))
        axis.imshow(weights[None, :], cmap="viridis", aspect="auto", vmin=0)
        axis.set_xticks(range(len(tokens)), tokens, rotation=60, ha="right")
        axis.set_yticks([])
        axes_title = [(axis, "pooling weights")]
    else:
        layers, heads = weights.shape[:2]
        size = max(2.5, 0.3 * len(tokens))
        figure, grid = plt.subplots(layers, heads, figsize=(size * heads, size * layers), squeeze=False)
        axes_title = []
        for layer in range(layers):
            for head in range(heads):
                axis = grid[layer][head]
                axis.imshow(weights[layer, head], cmap="viridis", vmin=0, vmax=1)
                axis.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=7)
                axis.set_yticks(range(len(tokens)), tokens, fontsize=7)
                axes_title.append((axis, f"layer {layer + 1} head {head + 1}"))
    for axis, title in axes_title:
        axis.set_title(title, fontsize=9)
    figure.suptitle(f"{reply.model} v{reply.version}: {result.label} ({result.probabilities.max():.3f})")
    figure.tight_layout()
    out = Path(args.out)
    figure.savefig(out, dpi=110)
    plt.close(figure)
    print(f"wrote {out} ({len(axes_title)} panel(s), {len(tokens)} tokens, label {result.label})")
    return 0


def _connection_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """How to reach the server. Accepted before and after the command
    (`attnserve-client --target h:p health` = `attnserve-client health --target h:p`):
    after it they carry no defaults, so they override only what is given."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument("--target", default=default("127.0.0.1:50051"), help="server address host:port")
    parser.add_argument("--timeout", type=float, default=default(30.0), help="deadline of each call, seconds")
    parser.add_argument(
        "--tls-ca", type=Path, default=default(None), help="PEM CA of the server's certificate: use TLS"
    )
    parser.add_argument(
        "--tls-cert",
        type=Path,
        default=default(None),
        help="PEM client certificate (mutual TLS; with --tls-key)",
    )
    parser.add_argument("--tls-key", type=Path, default=default(None), help="PEM key of --tls-cert")
    parser.add_argument(
        "--tls-server-name",
        default=default(None),
        help="name the server's certificate must carry (default: host)",
    )
    parser.add_argument(
        "--token", default=default(os.environ.get(TOKEN_ENV)), help=f"bearer token (default: ${TOKEN_ENV})"
    )


def _client_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnserve-client", description="Call an attnserve server.")
    _connection_options(parser, defaults=True)
    after = argparse.ArgumentParser(add_help=False)
    _connection_options(after, defaults=False)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_text, parents=[after])

    classify = command("classify", "classify texts; print labels, probabilities, attention")
    classify.add_argument("texts", nargs="+")
    explain = command("explain", "write a PNG of every layer's and head's attention")
    explain.add_argument("text")
    explain.add_argument("--out", default="attention.png", help="PNG file to write")
    for sub in (classify, explain):
        sub.add_argument("--model", default="", help="model name (optional when the server holds one)")
        sub.add_argument("--version", type=int, default=0, help="model version (0 = latest)")
    classify.add_argument(
        "--attention",
        default="auto",
        choices=["auto", "none", "pooled", "last_layer", "all", "rollout"],
        help="attention mode (auto: pooled when the model has attention)",
    )
    classify.add_argument("--top-k", type=int, default=0, help="also list the k most attended tokens")
    classify.add_argument("--json", action="store_true", help="print JSON instead of tables")
    models = command("models", "list the served models")
    models.add_argument("--json", action="store_true")
    health = command("health", "print the health status (exit 0 when SERVING)")
    health.add_argument("--service", default="", help="a model name; empty = the whole server")
    reload = command("reload", "admin: load new or changed versions of models")
    reload.add_argument("models", nargs="*", help="model names (none: every model)")
    unload = command("unload", "admin: stop serving a model")
    unload.add_argument("model")
    return parser


def _security(args: argparse.Namespace) -> Security:
    return Security(
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_server_name=args.tls_server_name,
        token=args.token,
    )


def _admin(args: argparse.Namespace, security: Security) -> int:
    from attnserve.service.client.admin import AdminClient

    with AdminClient(args.target, timeout=max(args.timeout, 300.0), security=security) as admin:
        if args.command == "reload":
            changes = admin.reload(*args.models)
        else:
            changes = {args.model: admin.unload(args.model)}
    print(json.dumps(changes, indent=2))
    return 0


def _classify(client: Any, args: argparse.Namespace) -> int:
    info = client.model(args.model, args.version)
    mode = args.attention
    if mode == "auto":
        mode = "pooled" if info.attention_kind != "none" else "none"
    reply = client.classify(
        args.texts, model=args.model, version=args.version, attention=mode, top_k=args.top_k
    )
    if args.json:
        out = [
            {
                "text": text,
                "label": r.label,
                "label_id": r.label_id,
                "probabilities": r.probabilities.tolist(),
                "tokens": r.tokens,
                "truncated": r.truncated,
                "attention": None if r.attention is None else r.attention.tolist(),
                "top_tokens": [
                    {"token": t.token, "index": t.index, "weight": t.weight} for t in r.top_tokens
                ],
            }
            for text, r in zip(args.texts, reply.results, strict=True)
        ]
        print(json.dumps({"model": reply.model, "version": reply.version, "results": out}, indent=2))
    else:
        _print_classification(reply, args.texts, info.labels)
    return 0


def _models(client: Any, args: argparse.Namespace) -> int:
    infos = client.models()
    if args.json:
        print(json.dumps([info.__dict__ for info in infos], indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("model", "version", "versions", "family", "labels", "max_len", "attention", "provider")
    for info in infos:
        attention = info.attention_kind + (
            f" {info.attention_layers}x{info.attention_heads}" if info.attention_kind == "layers" else ""
        )
        table.add_row(
            info.name,
            str(info.version),
            ",".join(map(str, info.versions)),
            info.family,
            ", ".join(info.labels),
            str(info.max_len),
            attention,
            info.provider,
        )
    Console().print(table)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from attnserve.service.client import Client, ClientError

    parser = _client_parser()
    args = parser.parse_args(argv)
    try:
        security = _security(args)
    except ValueError as exc:
        parser.error(str(exc))
    if args.command in ("reload", "unload"):
        try:
            return _admin(args, security)
        except ClientError as exc:
            print(f"attnserve-client: {exc.code.name}: {exc.details}", file=sys.stderr)
            return 1
    with Client(args.target, timeout=args.timeout, security=security) as client:
        try:
            if args.command == "classify":
                return _classify(client, args)
            if args.command == "explain":
                return _explain(client, args)
            if args.command == "models":
                return _models(client, args)
            status = client.health(args.service)
            print(status)
            return 0 if status == "SERVING" else 1
        except ClientError as exc:
            print(f"attnserve-client: {exc.code.name}: {exc.details}", file=sys.stderr)
            return 1
