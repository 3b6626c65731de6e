"""`attnserve-client`: classify, explain, list models, check health, and (with an admin
token) reload or unload models, over plaintext, TLS or mutual TLS.

The bearer token is read from `--token` or, better (a flag shows in `ps`), from the
ATTNSERVE_TOKEN environment variable; the server address from `--target` or ATTNSERVE_TARGET.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from pydantic import TypeAdapter

from attnserve.service.client.attribution import add_arguments as attribution_flags
from attnserve.service.client.channels import Security
from attnserve.service.client.explain import add_arguments as explain_flags
from attnserve.service.client.files.cli import add_arguments as file_flags
from attnserve.service.client.messages import ClientError
from attnserve.service.client.scores import Scoring, result_document
from attnserve.service.client.tracecontext import environment_trace
from attnserve.service.client.windows import add_argument as long_text_flag
from attnserve.service.common.helpformat import DefaultsHelpFormatter
from attnserve.service.common.model_info import ModelInfo
from attnserve.service.common.vocabulary import AttentionKind, AttentionMode, Attribution

MODEL_LIST = TypeAdapter(list[ModelInfo])

TOKEN_ENV = "ATTNSERVE_TOKEN"
TARGET_ENV = "ATTNSERVE_TARGET"
DEFAULT_TARGET = "127.0.0.1:50051"


def _connection_options(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """How to reach the server. Accepted before and after the command
    (`attnserve-client --target h:p health` = `attnserve-client health --target h:p`):
    after it they carry no defaults, so they override only what is given."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    target = os.environ.get(TARGET_ENV) or DEFAULT_TARGET
    parser.add_argument(
        "--target",
        default=default(target),
        help=f"server address host:port (default: ${TARGET_ENV}, else {DEFAULT_TARGET})",
    )
    parser.add_argument(
        "--timeout", type=float, default=default(30.0), help="deadline of each call, seconds (default: 30)"
    )
    parser.add_argument(
        "--tls-ca",
        type=Path,
        default=default(None),
        help="PEM CA of the server's certificate: use TLS (default: none, plaintext)",
    )
    parser.add_argument(
        "--tls-cert",
        type=Path,
        default=default(None),
        help="PEM client certificate for mutual TLS, with --tls-key (default: none)",
    )
    parser.add_argument(
        "--tls-key", type=Path, default=default(None), help="PEM key of --tls-cert (default: none)"
    )
    parser.add_argument(
        "--tls-server-name",
        default=default(None),
        help="name the server's certificate must carry (default: the host of --target)",
    )
    parser.add_argument(
        "--token",
        default=default(os.environ.get(TOKEN_ENV)),
        help=f"bearer token (default: ${TOKEN_ENV}, else none)",
    )


def _client_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnserve-client",
        description="Call an attnserve server. Exit status: 0 done, 1 the server answered with an "
        "error (printed as CODE: message), 2 a usage error.",
        formatter_class=DefaultsHelpFormatter,
    )
    _connection_options(parser, defaults=True)
    after = argparse.ArgumentParser(add_help=False)
    _connection_options(after, defaults=False)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            parents=[after],
            formatter_class=DefaultsHelpFormatter,
        )

    classify = command(
        "classify", "classify texts, or every row of a file (--input/--output); print labels and attention"
    )
    classify.add_argument("texts", nargs="*", help="texts to classify, one argument each")
    explain = command(
        "explain", "write a PNG of the attention of one text (every map, or one picked), or its attribution"
    )
    explain.add_argument("text", help="the text to explain")
    explain.add_argument("--out", default="attention.png", help="PNG file to write")
    explain_flags(explain)
    for sub in (classify, explain):
        sub.add_argument(
            "--model",
            default="",
            help="model name (default: the server's --default-model, or its only model)",
        )
        sub.add_argument("--version", type=int, default=0, help="model version, 0 = the latest")
        attribution_flags(sub)
        long_text_flag(sub)
    classify.add_argument(
        "--attention",
        default="auto",
        choices=["auto", *AttentionMode.words()],
        help="attention mode; auto = pooled when the model has attention",
    )
    classify.add_argument("--top-k", type=int, default=0, help="also list the k most attended tokens")
    classify.add_argument("--json", action="store_true", help="print JSON instead of tables (default: off)")
    file_flags(classify)
    models = command("models", "list the served models")
    models.add_argument("--json", action="store_true", help="print JSON instead of a table (default: off)")
    health = command("health", "print the health status (exit 0 when SERVING)")
    health.add_argument("--service", default="", help="a model name (default: the whole server)")
    reload = command("reload", "admin: load new or changed versions of models (server started with --admin)")
    reload.add_argument("models", nargs="*", help="model names (default: every model)")
    unload = command("unload", "admin: stop serving a model (server started with --admin)")
    unload.add_argument("model", help="the model to stop serving")
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
        has_attention = info.attention_kind != AttentionKind.NONE
        mode = (AttentionMode.POOLED if has_attention else AttentionMode.NONE).word
    reply = client.classify(
        args.texts,
        model=args.model,
        version=args.version,
        attention=mode,
        top_k=args.top_k,
        attribution=args.attribution,
        attribution_budget=args.attribution_budget,
        attribution_label=args.attribution_label,
        long_text=args.long_text,
    )
    scoring = Scoring.of(info)
    if args.json:
        out = [result_document(t, r, scoring) for t, r in zip(args.texts, reply.results, strict=True)]
        print(json.dumps({"model": reply.model, "version": reply.version, "results": out}, indent=2))
    else:
        from attnserve.service.client.render import print_classification

        print_classification(
            reply, args.texts, info.labels, mode, args.attribution,
            scoring=scoring, attribution_label=args.attribution_label,
            combine=info.windows.combine if info.windows else "",
        )  # fmt: skip
    return 0


def _models(client: Any, args: argparse.Namespace) -> int:
    infos = client.models()
    if args.json:
        print(MODEL_LIST.dump_json(infos, indent=2).decode())  # as GET /v1/models writes each one
    else:
        from attnserve.service.client.render import print_models

        print_models(infos)
    return 0


def _problem(exc: ClientError, args: argparse.Namespace) -> str:
    """One line for a failed call; a few codes get what to do about them."""
    line = f"attnserve-client: {exc.code.name}: {exc.details}"
    if exc.code is grpc.StatusCode.UNAVAILABLE:
        line += f" (is a server listening at {args.target}? `make serve` starts one)"
    elif getattr(args, "long_text", "") == "reject" and "max_len" in exc.details:
        line += " (--long-text windows reads it whole, --long-text truncate cuts it)"
    elif args.command == "health" and exc.code is grpc.StatusCode.NOT_FOUND:
        line = (
            f"attnserve-client: NOT_FOUND: the server has no health status for {args.service!r}: "
            "name a served model (attnserve-client models lists them) or leave --service out"
        )
    return line


def _run(args: argparse.Namespace, security: Security) -> int:
    from attnserve.service.client import Client

    if args.command in ("reload", "unload"):
        return _admin(args, security)
    with Client(args.target, timeout=args.timeout, security=security) as client:
        if args.command == "classify" and args.input is not None:
            from attnserve.service.client.files.cli import run as run_file

            return run_file(client, args)
        if args.command == "classify":
            return _classify(client, args)
        if args.command == "explain":
            from attnserve.service.client.explain import explain

            return explain(client, args)
        if args.command == "models":
            return _models(client, args)
        status = client.health(args.service)
        print(status)
        return 0 if status == "SERVING" else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = _client_parser()
    args = parser.parse_args(argv)
    if args.command == "classify" and not args.texts and args.input is None:
        parser.error("classify needs texts, or --input FILE --output FILE")
    if args.command == "classify" and args.texts and args.input is not None:
        parser.error("classify takes texts or --input, not both")
    if args.command == "classify" and args.input is not None and args.attribution != Attribution.NONE.word:
        parser.error("--attribution scores texts given as arguments, not the rows of --input")
    if getattr(args, "attribution_label", "") and args.attribution == Attribution.NONE.word:
        parser.error("--attribution-label names the label an --attribution explains: add --attribution")
    try:
        security = _security(args)
    except ValueError as exc:
        parser.error(str(exc))
    try:
        with environment_trace():  # a shell script traced by its caller continues that trace
            return _run(args, security)
    except ClientError as exc:
        print(_problem(exc, args), file=sys.stderr)
        return 1
