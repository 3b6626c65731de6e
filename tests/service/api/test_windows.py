"""Long texts read whole, as windows, on every front end: a tiny BERT classifier made with
transformers, imported with `attnserve-export FOLDER --max-len 16` (so a sentence of a few
dozen words needs several windows), served on 127.0.0.1. The oracle: the bundle's own
tokenizer cut into windows of 16 tokens sharing the policy's stride (tokenizers' overflow,
each window with [CLS] and [SEP]), each window run through transformers, the windows' logits
averaged (or the most confident window's taken).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer

from attnserve.export.cli import main as export_main
from attnserve.service.bundle import MANIFEST_FILE
from attnserve.service.client import Client, ClientError
from attnserve.service.proto.attnserve.v1 import attnserve_pb2 as apb
from attnserve.service.proto.inference import grpc_service_pb2 as pb
from tests.export.hf_classifiers import ARCHITECTURES, save_classifier, texts
from tests.support import http
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.v2 import V2Calls, output, text_request

MEAN, MAX = "mean-model", "max-model"
WINDOW, STRIDE = 16, 4
LONG = " ".join(texts(8, seed=11))  # several windows of 16 tokens
SHORT = "the film was good"
ATOL = 1e-5


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_classifier(ARCHITECTURES["bert"], tmp_path_factory.mktemp("windows") / "hf", seed=2)


@pytest.fixture(scope="module")
def server(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    repository = tmp_path_factory.mktemp("windows-models")
    for name, combine, limit in ((MEAN, "mean", 16), (MAX, "max", 3)):
        argv = [str(folder), "--repository", str(repository), "--name", name, "--max-len", str(WINDOW),
                "--no-latency", "--long-texts", "windows", "--stride", str(STRIDE), "--combine", combine,
                "--max-windows", str(limit)]  # fmt: skip
        assert export_main(argv) == 0
        policy = json.loads((repository / name / "1" / MANIFEST_FILE).read_text())["long_texts"]
        want = {"window": WINDOW, "stride": STRIDE, "combine": combine, "max_windows": limit, "head": None}
        assert policy == want | {"chosen": None}
    with RunningServer(make_settings(repository, http_port=free_port())) as running:
        yield running


def _windows_oracle(server: RunningServer, folder: Path, text: str) -> tuple[list[list[int]], np.ndarray]:
    """The text's windows (ids) as tokenizers cuts them, and transformers' logits of each."""
    tokenizer = Tokenizer.from_file(str(server.settings.repository / MEAN / "1" / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=WINDOW, stride=STRIDE)
    encoding = tokenizer.encode(text)
    windows = [e.ids for e in (encoding, *encoding.overflowing)]
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        logits = [model(input_ids=torch.tensor([ids])).logits[0].numpy() for ids in windows]
    return windows, np.stack(logits)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=-1, keepdims=True))


def test_a_long_text_is_read_as_windows_whose_mean_decides(server: RunningServer, folder: Path) -> None:
    windows, logits = _windows_oracle(server, folder, LONG)
    assert len(windows) >= 3
    with Client(server.target, timeout=30) as client:
        result = client.classify(LONG, model=MEAN, long_text="windows", attention="pooled", top_k=3).results[
            0
        ]
    assert not result.truncated
    assert len(result.windows) == len(windows)
    np.testing.assert_allclose([w.probabilities for w in result.windows], _softmax(logits), atol=ATOL)
    assert [w.weight for w in result.windows] == pytest.approx([1 / len(windows)] * len(windows))
    np.testing.assert_allclose(result.probabilities, _softmax(logits.mean(axis=0)), atol=ATOL)
    # Windows cover the text from its first word to its last, in order, overlapping.
    starts, ends = [w.start for w in result.windows], [w.end for w in result.windows]
    assert starts[0] == 0 and ends[-1] == len(LONG) and starts == sorted(starts)
    assert all(later < earlier_end for later, earlier_end in zip(starts[1:], ends[:-1], strict=True))
    # The whole text's tokens, one attention weight each, summing to 1; top tokens among them.
    whole = Tokenizer.from_file(str(server.settings.repository / MEAN / "1" / "tokenizer.json"))
    whole.no_truncation()
    assert result.tokens == whole.encode(LONG).tokens
    assert result.attention is not None and result.attention.shape == (len(result.tokens),)
    assert float(result.attention.sum()) == pytest.approx(1.0, abs=1e-5)
    assert result.attention[0] == 0 and result.attention[-1] == 0  # [CLS] and [SEP]
    top = result.top_tokens
    assert len(top) == 3 and top[0].weight == pytest.approx(float(result.attention.max()))


def test_the_most_confident_window_decides_under_max(server: RunningServer, folder: Path) -> None:
    text = " ".join(LONG.split()[:20])
    windows, logits = _windows_oracle(server, folder, text)
    assert 1 < len(windows) <= 3
    best = int(_softmax(logits).max(axis=1).argmax())
    with Client(server.target, timeout=30) as client:
        result = client.classify(text, model=MAX, long_text="windows").results[0]
    assert [w.weight for w in result.windows] == [1.0 if i == best else 0.0 for i in range(len(windows))]
    np.testing.assert_allclose(result.probabilities, _softmax(logits[best]), atol=ATOL)


def test_a_text_that_fits_is_one_window_and_answers_as_ever(server: RunningServer) -> None:
    with Client(server.target, timeout=30) as client:
        plain = client.classify(SHORT, model=MEAN).results[0]
        windowed = client.classify(SHORT, model=MEAN, long_text="windows", attention="last_layer").results[0]
    assert plain.windows == []
    assert [(w.start, w.end, w.weight) for w in windowed.windows] == [(0, len(SHORT), 1.0)]
    np.testing.assert_allclose(windowed.probabilities, plain.probabilities, atol=1e-6)
    assert windowed.attention is not None and windowed.attention.ndim == 3  # any mode, as ever


def test_every_front_end_reads_windows(server: RunningServer, folder: Path) -> None:
    _, logits = _windows_oracle(server, folder, LONG)
    want = _softmax(logits.mean(axis=0))
    port = server.server.http_port if server.server else 0
    reply = http.classify(port, MEAN, {"texts": [LONG, SHORT], "long_text": "windows"})
    assert reply.status == 200, reply.body
    results = reply.json()["results"]
    np.testing.assert_allclose(results[0]["probabilities"], want, atol=ATOL)
    assert len(results[0]["windows"]) == len(logits) and len(results[1]["windows"]) == 1
    # V2 gRPC: the WINDOWS output [B, W, 3], zero-padded, beside the label outputs.
    calls = V2Calls(server.target)
    try:
        request = text_request(MEAN, [LONG, SHORT])
        request.parameters["long_text"].string_param = "windows"
        v2 = calls.infer(request)
        np.testing.assert_allclose(output(v2, "PROBABILITIES")[0], want, atol=ATOL)
        table = output(v2, "WINDOWS")
        assert table.shape == (2, len(logits), 3)
        assert table[1, 0].tolist() == [0.0, float(len(SHORT)), 1.0] and not table[1, 1:].any()
        assert table[0, :, 2].sum() == pytest.approx(1.0)
        plain = calls.infer(text_request(MEAN, [SHORT]))
        assert "WINDOWS" not in [t.name for t in plain.outputs]  # not read as windows: not sent
        metadata = calls.unary("ModelMetadata", pb.ModelMetadataRequest(name=MEAN), pb.ModelMetadataResponse)
        assert isinstance(metadata, pb.ModelMetadataResponse)
        assert ("WINDOWS", "FP32", [-1, -1, 3]) in [
            (t.name, t.datatype, list(t.shape)) for t in metadata.outputs
        ]
    finally:
        calls.close()
    # attnserve.v1 describes the policy.
    with Client(server.target, timeout=30) as client:
        info = client.model(MAX)
    assert info.windows is not None
    assert (info.windows.window, info.windows.stride, info.windows.combine, info.windows.max_windows) == (
        WINDOW, STRIDE, "max", 3,
    )  # fmt: skip


def test_what_windows_do_not_offer_is_refused_naming_the_reason(server: RunningServer) -> None:
    with Client(server.target, timeout=30) as client:
        with pytest.raises(ClientError) as too_many:
            client.classify(LONG, model=MAX, long_text="windows")
        assert too_many.value.code.name == "INVALID_ARGUMENT"
        assert "windows of 16 tokens; the model reads at most 3 (max_windows)" in too_many.value.details
        with pytest.raises(ClientError) as mode:
            client.classify(LONG, model=MEAN, long_text="windows", attention="all")
        assert "not offered over windows" in mode.value.details
        with pytest.raises(ClientError) as explained:
            client.classify(LONG, model=MEAN, long_text="windows", attribution="shapley")
        assert "shapley is not offered over windows" in explained.value.details
        with pytest.raises(ClientError) as rejected:
            client.classify(LONG, model=MEAN, long_text="reject")
        assert "max_len of 16 tokens" in rejected.value.details
        truncated = client.classify(LONG, model=MEAN).results[0]
    assert truncated.truncated and truncated.windows == []
    port = server.server.http_port if server.server else 0
    reply = http.classify(port, MEAN, {"texts": [LONG], "long_text": "pages"})
    assert (
        reply.status == 400
        and "long_text: 'pages' is not one of truncate, reject, windows" in reply.body.decode()
    )
    assert apb.ClassifyRequest(long_text="windows").long_text == "windows"


def test_export_refuses_a_policy_that_does_not_fit(folder: Path, tmp_path: Path) -> None:
    base = [
        str(folder),
        "--repository",
        str(tmp_path),
        "--name",
        "m",
        "--max-len",
        str(WINDOW),
        "--no-latency",
    ]
    assert export_main([*base, "--long-texts", "windows", "--window", "40"]) == 2  # over max_len
    assert export_main([*base, "--long-texts", "windows", "--stride", "14"]) == 2  # no room to move on
    assert export_main([*base, "--stride", "4"]) == 2  # a stride without --long-texts
    assert not (tmp_path / "m" / "1").exists()


def test_occlusion_scores_the_windows_then_the_words_of_the_decisive_one(
    server: RunningServer, folder: Path
) -> None:
    """Window level: the text's drop when the mean leaves a window out; word level: the drop
    when the decisive window's row lacks the word, that row's logits in the window's place."""
    windows, logits = _windows_oracle(server, folder, LONG)
    with Client(server.target, timeout=30) as client:
        result = client.classify(LONG, model=MEAN, long_text="windows", attribution="occlusion").results[0]
    label = result.label_id
    full = _softmax(logits.mean(axis=0))[label]
    drops = [full - _softmax(np.delete(logits, w, axis=0).mean(axis=0))[label] for w in range(len(windows))]
    assert all(w.attribution is not None for w in result.windows)
    np.testing.assert_allclose([float(w.attribution or 0) for w in result.windows], drops, atol=ATOL)
    decisive = int(np.argmax(drops))
    assert result.attribution is not None and result.attribution.shape == (len(result.tokens),)
    # The first word of the decisive window: its pieces removed from that window's ids.
    tokenizer = Tokenizer.from_file(str(server.settings.repository / MEAN / "1" / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=WINDOW, stride=STRIDE)
    encoding = tokenizer.encode(LONG)
    window = (encoding, *encoding.overflowing)[decisive]
    word = window.word_ids[1]
    pieces = [i for i, w in enumerate(window.word_ids) if w == word and not window.special_tokens_mask[i]]
    kept = [t for i, t in enumerate(window.ids) if i not in pieces]
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        changed = logits.copy()
        changed[decisive] = model(input_ids=torch.tensor([kept])).logits[0].numpy()
    want = full - _softmax(changed.mean(axis=0))[label]
    start, end = window.offsets[pieces[0]][0], window.offsets[pieces[-1]][1]
    scored = [
        score
        for score, (a, b) in zip(result.attribution, result.offsets, strict=True)
        if a >= start and b <= end and b > a
    ]
    assert scored and all(score == pytest.approx(want, abs=ATOL) for score in scored)
    assert result.attribution_rows == len({w for w in window.word_ids if w is not None})


def test_a_short_text_beside_a_long_one_gets_its_words_scored(server: RunningServer) -> None:
    """In a call whose texts run as windows, a text of one window is attributed word by word
    as it would be alone; it has no window level."""
    with Client(server.target, timeout=30) as client:
        both = client.classify(
            [LONG, SHORT], model=MEAN, long_text="windows", attribution="occlusion"
        ).results
        alone = client.classify(SHORT, model=MEAN, attribution="occlusion").results[0]
    short = both[1]
    assert [w.attribution for w in short.windows] == [None]
    assert short.attribution is not None and alone.attribution is not None
    np.testing.assert_allclose(short.attribution, alone.attribution, atol=ATOL)
    assert short.attribution_rows == alone.attribution_rows
