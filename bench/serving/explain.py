"""How faithful each explanation of a model is, and what one costs: ERASER's metrics per method.

Each argument is MODEL=RUN (MODEL alone leaves Integrated Gradients out), RUN an attnserve
training run or the Hugging Face folder an imported model came from (Integrated Gradients then
runs on the original transformers model); methods and definitions: docs/benchmarks.md, the
metrics: bench/serving/faithfulness.py.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from attnserve.service.bundle import read_bundle
from attnserve.service.common.vocabulary import AttentionKind, AttentionMode, Attribution
from attnserve.service.common.weights import importance
from attnserve.service.engine.models.tokenization import TextTokenizer
from attnserve.service.engine.request.attribution import least_budget, words
from bench import sections
from bench.render import markdown_table, num, ratio, write_between
from bench.serving.ceiling import bundle_dir, session_for
from bench.serving.faithfulness import KS, Method, Row, Text, faithfulness, per_word, probabilities
from bench.serving.http import HttpConnection
from bench.serving.results import describe, one_line
from bench.serving.texts import csv_texts
from kit.launch import attnserve, run_async
from kit.ports import free_port

RANDOM, IG = "random", "integrated gradients"
OCCLUSION, SHAPLEY = Attribution.OCCLUSION.word, Attribution.SHAPLEY.word
POOLED, CLS, ROLLOUT = "attention: pooled", "attention: [CLS], last layer", "attention: rollout"
ATTENTION_CALLS = {POOLED: AttentionMode.POOLED.word, CLS: AttentionMode.LAST_LAYER.word,
                   ROLLOUT: AttentionMode.ROLLOUT.word}  # fmt: skip
PAGE, BEGIN, END = Path("results") / "explanations.md", "<!-- explain:begin -->", "<!-- explain:end -->"


@dataclass(frozen=True)
class ModelResult:
    model: str
    version: int
    family: str
    label_graph: str  # what answers the server's attribution rows
    texts: int
    words: float  # per text, mean
    ig_steps: int
    rows: list[Row]


async def served(port: int, model: str, texts: list[Text], methods: list[Method], budget: int) -> None:
    """Each text through every served method in turn, one call at a time, timed at the client."""
    connection = HttpConnection(port)
    url, headers = f"/v1/models/{model}:classify", {"Content-Type": "application/json"}
    bodies: dict[str, dict[str, Any]] = {name: {"attention": mode} for name, mode in ATTENTION_CALLS.items()}
    bodies |= {name: {"attribution": name} for name in (OCCLUSION, SHAPLEY)}

    async def call(text: Text, method: Method) -> tuple[dict[str, Any], float]:
        # Shapley needs words + 1 coalitions to determine a text's scores: the server refuses fewer.
        bodies[SHAPLEY]["attribution_budget"] = max(budget, least_budget(len(text.units)))
        payload = json.dumps({"texts": [text.text], **bodies[method.name]}).encode()
        started = time.perf_counter()
        result: dict[str, Any] = json.loads(await connection.post(url, payload, headers))["results"][0]
        return result, 1e3 * (time.perf_counter() - started)

    for method in methods:  # warm-up: first calls of each kind stay out of the figures
        await call(texts[-1], method)
    for text in texts:
        for method in methods:
            result, ms = await call(text, method)
            if len(result["tokens"]) != len(text.ids):
                raise RuntimeError(f"{model}: the server read {text.text!r} as other tokens than this bench")
            method.ms.append(ms)
            if method.name not in ATTENTION_CALLS:
                method.scores.append(np.array([result["attribution"][unit[0]] for unit in text.units]))
                method.rows.append(float(result["attribution_rows"]))
                continue
            weights = np.asarray(result["attention"], dtype=np.float32)
            if method.name == POOLED:
                tokens = importance(weights)
            else:  # the first token's query row, heads averaged (last_layer) or rolled out
                tokens = (weights.mean(axis=0) if weights.ndim == 3 else weights)[0]
            method.scores.append(per_word(tokens, text.units))
            method.rows.append(1.0)
    await connection.close()


def integrated_gradients(run_dir: Path, texts: list[Text], classes: np.ndarray, steps: int,
                         special_ids: frozenset[int]) -> Method:  # fmt: skip
    """Captum's LayerIntegratedGradients over the token embedding table, one text at a time: baseline
    the same ids with every non-special token the pad id, target the predicted class's probability."""
    import torch
    from captum.attr import LayerIntegratedGradients

    forward, layer, pad_id = _differentiable(run_dir)
    ig = LayerIntegratedGradients(forward, layer)
    method = Method(IG)
    for index, (text, target) in enumerate([(texts[-1], classes[-1]), *zip(texts, classes, strict=True)]):
        ids = torch.from_numpy(text.ids.astype(np.int64)).unsqueeze(0)  # [1, n]
        special = torch.tensor([int(t) in special_ids for t in text.ids])
        baseline = torch.where(special, ids, torch.full_like(ids, pad_id))
        mask, started = torch.ones_like(ids), time.perf_counter()
        attributions = ig.attribute(ids, baselines=baseline, target=int(target), n_steps=steps,
                                    additional_forward_args=(mask,), internal_batch_size=steps)  # fmt: skip
        if index > 0:  # the first call warms up and stays out of the figures
            method.ms.append(1e3 * (time.perf_counter() - started))
            method.scores.append(per_word(attributions.detach().sum(-1)[0].numpy(), text.units))
            method.rows.append(float(steps))
    return method


def _differentiable(run_dir: Path) -> tuple[Any, Any, int]:
    """(probabilities of (ids, mask), the token embedding table, the pad id) of an attnserve run, or
    of the transformers model of a Hugging Face folder (recognised by its config.json)."""
    if (run_dir / "config.json").is_file() and not (run_dir / "checkpoint.pt").exists():
        import transformers

        hf = transformers.AutoModelForSequenceClassification.from_pretrained(run_dir).eval()
        pad = hf.config.pad_token_id if hf.config.pad_token_id is not None else 0
        return (lambda ids, mask: hf(input_ids=ids, attention_mask=mask).logits.softmax(-1),
                hf.get_input_embeddings(), int(pad))  # fmt: skip
    from attnserve.training.models.base import SequenceClassifier
    from attnserve.training.models.encoder import EncoderClassifier
    from attnserve.training.run.checkpoint import load_run

    model = (run := load_run(run_dir)).model
    if isinstance(model, EncoderClassifier):
        layer = model.encoder.get_input_embeddings()
    elif isinstance(model, SequenceClassifier):
        layer = model.embed
    else:
        raise ValueError(f"{run_dir}: no token embedding table to attribute to ({run.family})")
    return (lambda ids, mask: model.logits(ids, mask).softmax(-1)), layer, run.pad_id


def measure(
    repository: Path, models: list[tuple[str, Path | None]], raw: list[str], args: Any
) -> list[ModelResult]:
    prepared = []
    for model, _ in models:
        bundle = read_bundle(bundle_dir(repository, model))
        manifest = bundle.manifest
        tokenizer = TextTokenizer(bundle.tokenizer_path, manifest.max_len, reject_long=False,
                                  max_text_chars=10**6, truncation=manifest.truncation)  # fmt: skip
        encoded, special = tokenizer.encode(raw), tokenizer.special_ids
        assert encoded.encodings is not None
        texts = [Text(raw[i], np.asarray(e.ids, dtype=np.int64), words(e, e.ids, special))
                 for i, e in enumerate(encoded.encodings)]  # fmt: skip
        texts = [text for text in texts if text.units]
        kind = manifest.attention.kind
        names = {AttentionKind.POOL: [POOLED], AttentionKind.NONE: []}.get(kind, [*ATTENTION_CALLS])
        prepared.append((bundle, tokenizer, texts, [Method(name) for name in [*names, OCCLUSION, SHAPLEY]]))
    http_port = free_port()
    with attnserve(repository, ["--http-port", str(http_port)]):
        for (model, _), (_, _, texts, methods) in zip(models, prepared, strict=True):
            print(f"  {model}: {len(texts)} texts through the server", file=sys.stderr, flush=True)
            run_async(served(http_port, model, texts, methods, args.budget))
    results = []
    for (model, run_dir), (bundle, tokenizer, texts, methods) in zip(models, prepared, strict=True):
        manifest, session = bundle.manifest, session_for(bundle.model_path, len(os.sched_getaffinity(0)))
        full_p = probabilities(session, [text.ids for text in texts], manifest.pad_id)
        classes = full_p.argmax(axis=1)
        rng = np.random.default_rng(args.seed)
        chosen = [Method(RANDOM, [rng.random(len(text.units)) for text in texts]), *methods]
        if run_dir is not None:
            print(f"  {model}: integrated gradients, {args.steps} steps", file=sys.stderr, flush=True)
            chosen.append(integrated_gradients(run_dir, texts, classes, args.steps, tokenizer.special_ids))
        filler = tokenizer.unk_id if tokenizer.unk_id is not None else manifest.pad_id
        full = full_p[np.arange(len(texts)), classes]
        rows = faithfulness(session, texts, full, classes, chosen, filler, manifest.pad_id)
        graph = manifest.label_graph
        quantized = graph is not None and graph.quantization is not None
        label = "model.onnx" if graph is None else f"label.onnx ({'int8' if quantized else 'float32'})"
        mean_words = float(np.mean([len(t.units) for t in texts]))
        results.append(ModelResult(model, manifest.version, manifest.family, label, len(texts), mean_words,
                                   args.steps, rows))  # fmt: skip
    return results


def render(results: list[ModelResult], started: str, machine: dict[str, Any], command: str) -> str:
    out = [f"Run {started} UTC. **Machine**: {one_line(machine)}.", "", f"**Command**: `{command}`."]
    percents = "/".join(str(k) for k in KS)
    header = ["method", "comprehensiveness AOPC", "÷ random", "sufficiency AOPC (lower is better)",
              "ms per explanation", "forward rows", f"comprehensiveness at {percents} %",
              f"sufficiency at {percents} %"]  # fmt: skip
    for r in results:
        by = {row.method: row for row in r.rows}
        floor = by[RANDOM].comprehensiveness
        body = [[row.method, num(row.comprehensiveness, 3), ratio(row.comprehensiveness, floor),
                 num(row.sufficiency, 3), "-" if row.ms is None else num(row.ms, 1),
                 "-" if row.forward_rows is None else num(row.forward_rows, 1),
                 " / ".join(f"{v:.3f}" for v in row.comprehensiveness_at),
                 " / ".join(f"{v:.3f}" for v in row.sufficiency_at)] for row in r.rows]  # fmt: skip
        title = f"### {r.model} (v{r.version}, {r.family}): {r.texts} texts, {r.words:.1f} words a text"
        note = f"Attribution rows served by {r.label_graph}"
        note += f"; integrated gradients: {r.ig_steps} steps." if IG in by else "; no training run given."
        out += ["", title, "", *markdown_table(header, body, "lrrrrrrr"), "", note]
        occ, ig = by.get(OCCLUSION), by.get(IG)
        if occ is not None and ig is not None and occ.ms and ig.ms:
            share = occ.ms / ig.ms
            met = occ.comprehensiveness >= ig.comprehensiveness and share <= 1 / 3
            out += ["", f"Occlusion beside integrated gradients: comprehensiveness "
                    f"{occ.comprehensiveness:.3f} vs {ig.comprehensiveness:.3f}, {occ.ms:.1f} vs "
                    f"{ig.ms:.1f} ms an explanation ({share:.2f} of it); as comprehensive at no more than "
                    f"a third of the cost: {'yes' if met else 'no'}."]  # fmt: skip
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = sections.parser("explain", __doc__, json_out=True)
    parser.add_argument("models", nargs="+", help="MODEL=RUN: a model of --repository and its training run")
    parser.add_argument("--repository", type=Path, required=True, help="model repository")
    parser.add_argument("--texts", type=Path, required=True, help="a CSV of texts, read in file order")
    parser.add_argument("--text-column", default="sentence", help="the text column of --texts")
    parser.add_argument("--count", type=int, default=500, help="texts explained (the first N of --texts)")
    parser.add_argument("--steps", type=int, default=50, help="integrated gradients: interpolation steps")
    parser.add_argument("--budget", type=int, default=64, help="shapley: coalitions a text (min. words + 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random scores")
    parser.add_argument("--publish", type=Path, default=None, help=f"write the tables into DOCS/{PAGE}")
    args = parser.parse_args(argv)
    sections.require_at_least(parser, args, {"count": 1, "steps": 1, "budget": 2})
    models = [(name, Path(run) if run else None) for name, _, run in (m.partition("=") for m in args.models)]
    started, machine = datetime.now(UTC).strftime("%Y-%m-%d %H:%M"), describe()
    command = "python -m bench explain " + shlex.join(argv if argv is not None else sys.argv[2:])
    try:
        results = measure(args.repository, models, csv_texts(args.texts, args.text_column, args.count), args)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise sections.Refused(str(exc)) from None
    text = render(results, started, machine, command)
    print(text)
    sections.write_json(args.out, {"started": started, "machine": machine, "command": command, "ks": KS,
                                   "models": [asdict(r) for r in results]})  # fmt: skip
    if args.publish is not None:
        write_between(args.publish / PAGE, BEGIN, END, text, "Explanations: faithfulness and cost")
    values = [v for r in results for row in r.rows for v in (row.comprehensiveness, row.sufficiency)]
    return 0 if all(math.isfinite(v) for v in values) else 1
