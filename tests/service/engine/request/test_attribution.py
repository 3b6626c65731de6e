"""Attributions: the estimators on their own, then served by a real server on models made here
whose label is decided by one word (tests/support/tiny_bert.py: "The plot was superb.")."""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnserve.export.parity import torch_threads
from attnserve.export.writer import export_run
from attnserve.service.common.vocabulary import Attribution
from attnserve.service.engine.request.attribution import (
    Explain,
    budgets,
    least_budget,
    plan_text,
    scores,
    words,
)
from attnserve.service.errors import InvalidArgument
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.run.pipeline import DataSpec, train_run
from tests.support.http import call
from tests.support.servers import RunningServer, free_port, make_settings
from tests.support.tiny_bert import make_tiny_bert, make_tokenizer, sentences

CAP = 512  # the server's max_attribution_rows in these tests


def _values(coalitions: np.ndarray, seed: int = 0) -> np.ndarray:
    """A random value per distinct coalition (the same coalition always gets the same value)."""
    rng = np.random.default_rng(seed)
    table: dict[bytes, float] = {}
    return np.array([table.setdefault(row.tobytes(), float(rng.random())) for row in coalitions])


def _brute_force_shapley(m: int, value: Any) -> np.ndarray:
    phi = np.zeros(m)
    for j in range(m):
        for subset in itertools.product([False, True], repeat=m):
            if subset[j]:
                continue
            size = sum(subset)
            weight = math.factorial(size) * math.factorial(m - size - 1) / math.factorial(m)
            with_j = list(subset)
            with_j[j] = True
            phi[j] += weight * (value(np.array(with_j)) - value(np.array(subset)))
    return phi


def test_enumerated_kernel_shap_equals_the_shapley_values() -> None:
    m = 5
    units = [[i] for i in range(1, m + 1)]
    ids = np.arange(100, 100 + m + 2)  # [CLS] w1..w5 [SEP]
    plan = plan_text(Attribution.SHAPLEY, ids, units, budget=64, filler=1)
    assert len(plan.coalitions) == 2**m  # few words: every coalition, exactly
    assert len(plan.rows) == 2**m - 1  # the text itself is the reply's own row
    values = _values(plan.coalitions)
    lookup = {c.tobytes(): v for c, v in zip(plan.coalitions, values, strict=True)}
    expected = _brute_force_shapley(m, lambda keep: lookup[keep.tobytes()])
    got = scores(plan, values[1:], values[0])
    np.testing.assert_allclose(got[1:-1], expected, atol=1e-6)
    assert got[0] == got[-1] == 0.0  # the special tokens around the words


def test_sampled_kernel_shap_keeps_the_budget_and_adds_up_to_the_full_difference() -> None:
    m = 12
    units = [[i] for i in range(m)]
    plan = plan_text(Attribution.SHAPLEY, np.arange(m), units, budget=40, filler=1)
    assert len(plan.coalitions) == 40 and plan.coalitions[0].all() and not plan.coalitions[1].any()
    assert len(plan.rows) == 39
    values = _values(plan.coalitions, seed=3)
    got = scores(plan, values[1:], values[0])
    assert got.sum() == pytest.approx(values[0] - values[1], abs=1e-6)
    again = plan_text(Attribution.SHAPLEY, np.arange(m), units, budget=40, filler=1)
    np.testing.assert_array_equal(again.coalitions, plan.coalitions)  # the same text, the same rows


@pytest.mark.parametrize("m", [3, 7, 12, 40])
def test_words_of_equal_worth_get_equal_scores_at_the_least_budget(m: int) -> None:
    """Where the rows leave the system short, no word (the last one least of all) takes what
    the rows do not determine: words that are worth the same score the same."""
    units = [[i] for i in range(m)]
    budget = least_budget(m)
    plan = plan_text(Attribution.SHAPLEY, np.arange(50, 50 + m), units, budget=budget, filler=1)
    values = plan.coalitions.sum(axis=1) / m  # every word adds 1/m
    got = scores(plan, values[1:], float(values[0]))
    np.testing.assert_allclose(got, np.full(m, 1.0 / m), atol=1e-6)


def test_an_additive_model_is_recovered_exactly_from_a_sample() -> None:
    m = 20
    worth = np.random.default_rng(5).normal(size=m)
    units = [[i] for i in range(m)]
    plan = plan_text(Attribution.SHAPLEY, np.arange(m), units, budget=64, filler=1)
    values = plan.coalitions.astype(float) @ worth
    np.testing.assert_allclose(scores(plan, values[1:], float(values[0])), worth, atol=1e-5)


def test_a_budget_too_few_for_the_words_is_refused_naming_the_least() -> None:
    units = [[[i] for i in range(5)], [[0]]]
    with pytest.raises(InvalidArgument, match=r"2 coalitions .* 5 words of text 0; shapley needs at least 6"):
        budgets(Explain(Attribution.SHAPLEY, 2), units, max_rows=512)
    assert budgets(Explain(Attribution.SHAPLEY, 6), units, max_rows=512) == [6, 6]
    many = [[[i] for i in range(100)]]  # no budget named: the default, raised to what the text needs
    assert budgets(Explain(Attribution.SHAPLEY), many, max_rows=512) == [101]
    assert least_budget(1) == 2 and least_budget(2) == 3 and least_budget(0) == 1


def test_occlusion_removes_one_word_per_row_and_never_leaves_a_row_empty() -> None:
    units = [[0], [1, 2]]  # a word of one piece, then a word of two
    plan = plan_text(Attribution.OCCLUSION, np.array([7, 8, 9]), units, budget=0, filler=1)
    assert [row.tolist() for row in plan.rows] == [[8, 9], [7]]  # the text itself is not run again
    np.testing.assert_allclose(scores(plan, np.array([0.2, 0.7]), 0.9), [0.7, 0.2, 0.2], atol=1e-6)
    lone = plan_text(Attribution.SHAPLEY, np.array([7]), [[0]], budget=64, filler=1)
    assert [row.tolist() for row in lone.rows] == [[1]]  # the empty coalition: the filler token


def test_word_pieces_merge_into_words_and_special_tokens_belong_to_none() -> None:
    tokenizer = make_tokenizer([text for text, _ in sentences(200)])
    encoding = tokenizer.encode("The scriptwriter was superb, truly!")
    units = words(encoding, encoding.ids, frozenset(range(5)))
    by_word = [" ".join(encoding.tokens[i] for i in unit) for unit in units]
    assert by_word[0] == "the" and by_word[-1] == "!" and "," in by_word
    assert any(len(unit) > 1 for unit in units), encoding.tokens  # "scriptwriter" in pieces
    assert [i for unit in units for i in unit] == list(range(1, len(encoding.ids) - 1))  # no [CLS]/[SEP]


def test_methods_parse_from_words_and_proto_names_and_refuse_others() -> None:
    assert Attribution.parse("occlusion") is Attribution.OCCLUSION
    assert Attribution.parse("ATTRIBUTION_METHOD_SHAPLEY") is Attribution.SHAPLEY
    assert Attribution.parse("") is Attribution.NONE
    with pytest.raises(
        ValueError, match="'lime' is not an attribution method; use one of: none, occlusion, shapley"
    ):
        Attribution.parse("lime")


# --- served ---------------------------------------------------------------------------------

KEY = "superb"  # the one word that makes a text positive
FILLER = ("the", "film", "plot", "cast", "script", "ending", "music", "was", "and", "it", "well")


def _decided(count: int, seed: int) -> list[tuple[str, str]]:
    """Texts of 3 to 8 filler words, positive exactly when KEY is among them (anywhere)."""
    rng = np.random.default_rng(seed)
    made = []
    for i in range(count):
        words_ = list(rng.choice(FILLER, size=int(rng.integers(3, 9))))
        if i % 2:
            words_.insert(int(rng.integers(0, len(words_) + 1)), KEY)
        made.append((" ".join(words_), "positive" if i % 2 else "negative"))
    return made


def _write(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in rows))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, int]]:
    root = tmp_path_factory.mktemp("attribution")
    data = DataSpec(path=str(_write(root / "decided.csv", _decided(400, seed=0))), seed=0)
    config = TrainConfig(
        epochs=6, batch_size=16, lr=3e-3, progress=False, seed=0, threads=1, word_dropout=0.0
    )
    with torch_threads(1):
        encoder = train_run(root / "encoder", "encoder", {"head": "cls"}, config, data,
                            pretrained=str(make_tiny_bert(root)))  # fmt: skip
        small = train_run(root / "small", "attention_pool", {"d_model": 16}, config, data)
    repository = root / "models"
    # float32 both ways: an int8 graph quantizes each batch's activations as a whole, so a text's
    # scores would move a little with its batch mates and the batch test could not be exact.
    export_run(encoder.run_dir, repository, "encoder", quantize="none")
    export_run(small.run_dir, repository, "small")
    # The same encoder with an int8 label graph (its gate opened wide: the graphs must differ).
    export_run(encoder.run_dir, repository, "encoder8", max_accuracy_drop=1.0, int8_tolerance=1e9)
    with RunningServer(make_settings(repository, http_port=free_port(), max_attribution_rows=CAP)) as running:
        assert running.server is not None
        yield running, running.server.http_port


def _classify(port: int, model: str, texts: list[str], **fields: Any) -> Any:
    reply = call(port, "POST", f"/v1/models/{model}:classify", {"texts": texts, **fields})
    assert reply.status == 200, reply.body
    return reply.json()


@pytest.mark.parametrize("model", ["encoder", "small"])
@pytest.mark.parametrize("method", ["occlusion", "shapley"])
def test_the_deciding_word_ranks_first_and_random_scores_do_not_find_it(
    server: tuple[RunningServer, int], model: str, method: str
) -> None:
    _, port = server
    texts = [text for text, label in _decided(16, seed=9) if label == "positive"]  # unseen texts
    reply = _classify(port, model, texts, attribution=method)
    assert reply["attribution"] == method
    rng = np.random.default_rng(0)
    found_random = 0
    for result in reply["results"]:
        tokens, attribution = result["tokens"], np.array(result["attribution"])
        assert (
            result["label"] == "positive"
            and len(attribution) == len(tokens)
            and result["attribution_rows"] > 0
        )
        assert tokens[int(np.argmax(attribution))] == KEY, (tokens, attribution.round(3))
        plain = [i for i, special in enumerate(result["special"]) if not special]
        found_random += tokens[plain[int(np.argmax(rng.random(len(plain))))]] == KEY
    assert found_random < len(texts)  # the test tells a faithful method from chance
    assert reply["timings"]["attribution_us"] > 0


def test_a_one_word_text_has_one_score_and_both_methods_agree(server: tuple[RunningServer, int]) -> None:
    _, port = server
    occlusion = _classify(port, "encoder", [KEY], attribution="occlusion")["results"][0]
    shapley = _classify(port, "encoder", [KEY], attribution="shapley")["results"][0]
    assert occlusion["tokens"] == ["[CLS]", KEY, "[SEP]"]
    assert occlusion["attribution"][0] == occlusion["attribution"][2] == 0.0
    assert (
        occlusion["attribution_rows"] == shapley["attribution_rows"] == 1
    )  # no words (the text is the reply's)
    # One word: its Shapley value is the whole difference, what occlusion measures too.
    assert shapley["attribution"][1] == pytest.approx(occlusion["attribution"][1], abs=1e-6)
    assert occlusion["attribution"][1] > 0  # the word is what makes the label
    small = _classify(port, "small", [KEY], attribution="occlusion")["results"][0]
    assert small["tokens"] == [KEY] and small["attribution_rows"] == 1 and small["attribution"][0] > 0


def test_texts_at_the_length_limit_are_attributed_token_for_token(server: tuple[RunningServer, int]) -> None:
    _, port = server
    long_text = " ".join([f"the film was {KEY}"] * 40)  # far over max_len: truncated
    for model, specials in (("encoder", 2), ("small", 0)):
        result = _classify(port, model, [long_text], attribution="occlusion")["results"][0]
        tokens = result["tokens"]
        assert result["truncated"] and len(result["attribution"]) == len(tokens)
        assert result["attribution_rows"] == len(tokens) - specials  # a row per word


def test_a_batch_answers_each_text_with_its_own_attribution(server: tuple[RunningServer, int]) -> None:
    _, port = server
    texts = [text for text, _ in _decided(6, seed=11)] + [KEY, "the music was dull"]
    for method in ("occlusion", "shapley"):
        together = _classify(port, "encoder", texts, attribution=method, attribution_budget=24)["results"]
        for text, result in zip(texts, together, strict=True):
            alone = _classify(port, "encoder", [text], attribution=method, attribution_budget=24)["results"][
                0
            ]
            assert alone["tokens"] == result["tokens"]
            np.testing.assert_allclose(alone["attribution"], result["attribution"], atol=1e-5)


def test_attribution_rides_beside_attention(server: tuple[RunningServer, int]) -> None:
    _, port = server
    reply = _classify(port, "encoder", [f"the cast was {KEY}"], attribution="occlusion", attention="pooled")
    result = reply["results"][0]
    n = len(result["tokens"])
    assert np.array(result["attention"]).shape == (n, n) and len(result["attribution"]) == n
    plain = _classify(port, "encoder", [f"the cast was {KEY}"])["results"][0]
    assert plain["attribution"] is None and plain["attribution_rows"] is None


def test_budgets_and_calls_over_the_servers_cap_are_refused_up_front(
    server: tuple[RunningServer, int],
) -> None:
    running, port = server
    before = running.value("attnserve_graph_batches_total")
    body = {"texts": [f"the plot was {KEY}"], "attribution": "shapley", "attribution_budget": CAP + 1}
    over = call(port, "POST", "/v1/models/encoder:classify", body)
    assert over.status == 400 and over.error["code"] == "INVALID_ARGUMENT"
    assert "attribution_budget" in over.error["message"] and "max_attribution_rows" in over.error["message"]
    max_len = call(port, "GET", "/v1/models/small").json()["max_len"]
    many = [" ".join(["the plot was dull"] * 40)] * (CAP // max_len + 1)  # each cut to max_len words
    refused = call(port, "POST", "/v1/models/small:classify", {"texts": many, "attribution": "occlusion"})
    assert refused.status == 400 and f"allows {CAP} in one call" in refused.error["message"]
    assert running.value("attnserve_graph_batches_total") == before  # refused before any row ran
    unknown = call(port, "POST", "/v1/models/small:classify", {"texts": ["x"], "attribution": "lime"})
    assert unknown.status == 400 and "occlusion" in unknown.error["message"]


def test_attribution_rows_run_through_the_versions_batcher(server: tuple[RunningServer, int]) -> None:
    running, port = server
    batches = running.value("attnserve_batch_size_count", model="small")
    texts = running.value("attnserve_batch_size_sum", model="small")
    counted = running.value("attnserve_attribution_rows_total", model="small", method="occlusion")
    _classify(port, "small", [f"the plot was {KEY}"], attribution="occlusion")
    assert running.value("attnserve_attribution_rows_total", model="small", method="occlusion") == counted + 4
    # The text's own batch, then its attribution's 4 rows (one per word) as at least one more batch.
    assert running.value("attnserve_batch_size_count", model="small") >= batches + 2
    assert running.value("attnserve_batch_size_sum", model="small") == texts + 1 + 4


def test_a_shapley_budget_too_few_for_the_words_is_refused_naming_the_least(
    server: tuple[RunningServer, int],
) -> None:
    """Two coalitions are the full and the empty text only: nothing says how to split the
    difference, which once all went to the last word."""
    running, port = server
    before = running.value("attnserve_graph_batches_total")
    text = f"{KEY} plot and dull cast"  # five words the model knows
    body = {"texts": [text], "attribution": "shapley", "attribution_budget": 2}
    refused = call(port, "POST", "/v1/models/small:classify", body)
    assert refused.status == 400 and refused.error["code"] == "INVALID_ARGUMENT", refused.body
    assert "the 5 words of text 0; shapley needs at least 6" in refused.error["message"]
    assert running.value("attnserve_graph_batches_total") == before  # refused before any row ran
    enough = _classify(port, "small", [text], attribution="shapley", attribution_budget=6)
    scored = np.array(enough["results"][0]["attribution"])
    assert np.count_nonzero(scored) > 1  # the difference is shared, not handed to one word


def _empty_text_probabilities(port: int, model: str, attention: bool) -> np.ndarray:
    """p(· | no words) for the tiny BERT ([CLS] [SEP]: ids 2, 3), on the graph a call with or
    without attention is answered by, through V2 REST's INPUT_IDS."""
    body: dict[str, Any] = {
        "inputs": [
            {"name": "INPUT_IDS", "datatype": "INT64", "shape": [1, 2], "data": [2, 3]},
            {"name": "ATTENTION_MASK", "datatype": "INT64", "shape": [1, 2], "data": [1, 1]},
        ],
        "outputs": [{"name": "PROBABILITIES"}],
    }
    if attention:
        body["outputs"].append({"name": "ATTENTION", "parameters": {"attention_mode": "pooled"}})
    reply = call(port, "POST", f"/v2/models/{model}/infer", body)
    assert reply.status == 200, reply.body
    out = next(o for o in reply.json()["outputs"] if o["name"] == "PROBABILITIES")
    return np.array(out["data"], dtype=np.float64)


@pytest.mark.parametrize("attention", ["pooled", "none"])
def test_shapley_scores_add_up_to_the_replys_own_probability(
    server: tuple[RunningServer, int], attention: str
) -> None:
    """One graph per answer: with attention asked the float32 graph answers the label, so the
    attribution rows run there too, and the scores add up to the reply's own probability of
    its label minus the empty text's on that graph (not the int8 label graph's)."""
    _, port = server
    texts = [text for text, _ in _decided(8, seed=21)]
    reply = _classify(port, "encoder8", texts, attribution="shapley", attention=attention)
    empty = _empty_text_probabilities(port, "encoder8", attention != "none")
    for result in reply["results"]:
        label = result["label_id"]
        whole = result["probabilities"][label]
        total = float(np.sum(result["attribution"]))
        # The label graph quantizes a batch's activations together: the empty row's value moves a
        # little with its batch mates there; the float32 graph is the same in any batch.
        tolerance = 1e-5 if attention != "none" else 2e-2
        assert total == pytest.approx(whole - empty[label], abs=tolerance), (result["tokens"], total)


def test_attribution_rows_leave_room_for_other_callers(server: tuple[RunningServer, int]) -> None:
    """Occlusion of long texts once queued all its rows at once: with a queue just larger than
    them, other callers of the version were refused RESOURCE_EXHAUSTED while it ran. Its rows
    now hold a share of the queue (a quarter at most), so plain calls beside it are answered."""
    running, port = server
    assert running.settings.repository is not None
    long_text = " ".join(["the film was", KEY, "and the cast was dull"] * 20)  # cut to max_len
    rows = _classify(port, "small", [long_text], attribution="occlusion")["results"][0]["attribution_rows"]
    texts = [long_text] * 8
    room = 8 * rows + 4  # all of one call's rows fit, and 4 places more
    settings = make_settings(
        running.settings.repository,
        http_port=free_port(),
        max_queue=room,
        max_attribution_rows=room,
        max_texts_per_request=8,
        max_concurrent_batches=1,
    )
    with RunningServer(settings) as busy:
        assert busy.server is not None
        busy_port = busy.server.http_port
        statuses: list[int] = []
        attributed: list[int] = []
        done = threading.Event()

        def attribute() -> None:
            try:
                for _ in range(5):
                    body = {"texts": texts, "attribution": "occlusion"}
                    attributed.append(call(busy_port, "POST", "/v1/models/small:classify", body).status)
            finally:
                done.set()

        worker = threading.Thread(target=attribute)
        worker.start()
        plain = [text for text, _ in _decided(8, seed=5)]
        while not done.is_set():
            statuses.append(call(busy_port, "POST", "/v1/models/small:classify", {"texts": plain}).status)
        worker.join(60)
    assert attributed == [200] * 5
    assert statuses and set(statuses) == {200}, statuses
