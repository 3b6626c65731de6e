"""Contract tests for every classifier family: shapes, masking, padding invariance, configs."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from attnserve.training.models import FAMILIES, Classifier, TransformerConfig, build_model, config_to_dict
from attnserve.training.models.base import SequenceClassifier
from attnserve.training.models.layers import SelfAttention, sinusoids

VOCAB = 40
MAX_LEN = 24
PAD = 0

# One small config per variant worth covering; every family appears at least once.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "mean_pool": ("mean_pool", {"d_model": 16}),
    "mean_pool-sinusoidal-cosine": (
        "mean_pool",
        {"d_model": 16, "positions": "sinusoidal", "head": "cosine"},
    ),
    "mean_pool-bigrams": ("mean_pool", {"d_model": 16, "ngram_buckets": 32}),
    "attention_pool": ("attention_pool", {"d_model": 16}),
    "self_attention-narrow-k": ("self_attention", {"d_model": 16, "qk_dim": 8}),
    "transformer-pre-mean": ("transformer", {"n_layers": 2, "n_heads": 2, "d_model": 16}),
    "transformer-post-cls-sinusoidal": (
        "transformer",
        {
            "n_layers": 2,
            "n_heads": 2,
            "d_model": 16,
            "norm": "post",
            "pooling": "cls",
            "positions": "sinusoidal",
        },
    ),
    "transformer-attention-pool-cosine": (
        "transformer",
        {"n_layers": 1, "n_heads": 4, "d_model": 16, "pooling": "attention", "head": "cosine"},
    ),
    "bow_mlp-counts": ("bow_mlp", {"hidden": 16}),
    "gru_attention-bigrams": ("gru_attention", {"d_model": 16, "n_queries": 2, "ngram_buckets": 32}),
    "bow_mlp-binary-2-layers": ("bow_mlp", {"hidden": 16, "n_layers": 2, "features": "binary"}),
}


def make(case: str, num_classes: int = 3, seed: int = 0) -> Classifier:
    family, extra = CASES[case]
    torch.manual_seed(seed)
    config = {"vocab_size": VOCAB, "max_len": MAX_LEN, "pad_id": PAD, "num_classes": num_classes, **extra}
    return build_model(family, config).eval()


def batch(lengths: list[int], width: int, seed: int = 0) -> tuple[Tensor, Tensor]:
    """Right-padded int64 ids/mask [B, width]; real ids avoid the pad id."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(PAD + 1, VOCAB, (len(lengths), width), generator=g)  # [B, T]
    mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()  # [B, T]
    return ids.masked_fill(mask == 0, PAD), mask


@pytest.fixture(scope="module")
def models() -> dict[str, Classifier]:
    return {case: make(case) for case in CASES}


def expected_attention_shape(model: Classifier, b: int, t: int) -> tuple[int, ...] | None:
    cfg = model.config
    assert isinstance(cfg, TransformerConfig) or model.attention_kind != "layers"
    return {
        "pool": (b, t),
        "self": (b, t, t),
        "layers": (b, getattr(cfg, "n_layers", 0), getattr(cfg, "n_heads", 0), t, t),
        "none": None,
    }[model.attention_kind]


def test_registry_holds_the_eight_families() -> None:
    assert set(FAMILIES) == {
        "encoder",
        "mean_pool",
        "attention_pool",
        "conv_attention",
        "gru_attention",
        "self_attention",
        "transformer",
        "bow_mlp",
    }
    kinds = {name: cls.attention_kind for name, cls in FAMILIES.items()}
    assert kinds == {
        "encoder": "layers",
        "mean_pool": "pool",
        "attention_pool": "pool",
        "conv_attention": "pool",
        "gru_attention": "pool",
        "self_attention": "self",
        "transformer": "layers",
        "bow_mlp": "none",
    }
    for name, cls in FAMILIES.items():
        assert cls.family == name
        assert dataclasses.is_dataclass(cls.config_cls)


@pytest.mark.parametrize("case", CASES)
def test_output_shapes_and_dtypes(case: str, models: dict[str, Classifier]) -> None:
    model = models[case]
    ids, mask = batch([7, 3, 5], width=7)
    with torch.no_grad():
        logits, attention = model(ids, mask)
    assert logits.shape == (3, 3) and logits.dtype == torch.float32
    shape = expected_attention_shape(model, 3, 7)
    if shape is None:
        assert attention is None
    else:
        assert attention is not None and attention.shape == shape and attention.dtype == torch.float32


def attention_keep(mask: Tensor, kind: str) -> Tensor:
    """Where weights may be non-zero, broadcast to the attention output's shape."""
    real = mask.bool()  # [B, T]
    if kind == "pool":
        return real  # [B, T]
    pair = real[:, :, None] & real[:, None, :]  # [B, T, T]: real query and real key
    return pair if kind == "self" else pair[:, None, None]  # [B, 1, 1, T, T]


@pytest.mark.parametrize("case", [c for c in CASES if not c.startswith("bow_mlp")])
def test_attention_rows_sum_to_one_and_padding_gets_exact_zero(
    case: str, models: dict[str, Classifier]
) -> None:
    model = models[case]
    ids, mask = batch([9, 4, 1, 6], width=9, seed=1)
    with torch.no_grad():
        _, attention = model(ids, mask)
    assert attention is not None
    keep = attention_keep(mask, model.attention_kind).expand_as(attention)
    assert torch.all(attention[~keep] == 0.0), "padded positions must get exactly zero weight"
    assert torch.all(attention >= 0.0)
    sums = attention.sum(dim=-1)  # one sum per attention row
    row_is_real = keep.any(dim=-1)  # rows whose query (or whole sequence) is real
    torch.testing.assert_close(sums[row_is_real], torch.ones_like(sums[row_is_real]), atol=1e-6, rtol=0)
    assert torch.all(sums[~row_is_real] == 0.0)


def test_self_attention_matches_torch_reference() -> None:
    """The hand-written attention equals torch's fused kernel on every real query."""
    torch.manual_seed(0)
    layer = SelfAttention(d_model=16, n_heads=4, qk_dim=8, dropout=0.0).eval()
    x = torch.randn(3, 6, 16)  # [B, T, D]
    mask = batch([6, 2, 4], width=6)[1].bool()  # [B, T]
    with torch.no_grad():
        got, weights = layer(x, mask)
        q, k, v = (
            proj(x).unflatten(-1, (4, -1)).transpose(1, 2) for proj in (layer.query, layer.key, layer.value)
        )
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        want = layer.out(ref.transpose(1, 2).flatten(2))  # [B, T, D]
        ref_weights = ((q @ k.transpose(-2, -1)) / (8 / 4) ** 0.5).masked_fill(
            ~mask[:, None, None, :], -torch.inf
        )
    torch.testing.assert_close(got[mask], want[mask], atol=1e-6, rtol=1e-5)
    real_queries = mask[:, None, :, None].expand_as(weights)
    torch.testing.assert_close(
        weights[real_queries], ref_weights.softmax(-1)[real_queries], atol=1e-6, rtol=1e-5
    )


@pytest.mark.parametrize("case", CASES)
@settings(max_examples=15, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=1, max_value=MAX_LEN - 8), min_size=1, max_size=5),
    extra=st.integers(min_value=1, max_value=8),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_padding_does_not_change_outputs(
    case: str, models: dict[str, Classifier], lengths: list[int], extra: int, seed: int
) -> None:
    model = models[case]
    width = max(lengths)
    ids, mask = batch(lengths, width, seed=seed)
    padded_ids = torch.cat([ids, torch.full((len(lengths), extra), PAD)], dim=1)  # [B, T + extra]
    padded_mask = torch.cat([mask, torch.zeros(len(lengths), extra, dtype=torch.long)], dim=1)
    with torch.no_grad():
        logits, attention = model(ids, mask)
        padded_logits, padded_attention = model(padded_ids, padded_mask)
        # Each row alone, without any padding, is what batching must not change.
        alone = [model(ids[i : i + 1, :n], mask[i : i + 1, :n])[0] for i, n in enumerate(lengths)]
    torch.testing.assert_close(padded_logits, logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(alone), logits, atol=1e-5, rtol=1e-5)
    if attention is not None:
        assert padded_attention is not None
        original = padded_attention[..., :width]
        if model.attention_kind != "pool":
            original = original[..., :width, :]
            assert torch.all(padded_attention[..., width:, :] == 0.0)
        torch.testing.assert_close(original, attention, atol=1e-5, rtol=1e-5)
        assert torch.all(padded_attention[..., width:] == 0.0)


@pytest.mark.parametrize("case", CASES)
def test_fully_padded_row_is_finite_in_outputs_and_gradients(case: str) -> None:
    model = make(case).train()
    ids, mask = batch([5, 0, 3], width=5, seed=2)
    logits, attention = model(ids, mask)
    assert torch.isfinite(logits).all()
    if attention is not None:
        assert torch.isfinite(attention).all()
        assert torch.all(attention[1] == 0.0), "a row with no real token attends to nothing"
    loss = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 2]))
    torch.autograd.backward(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} takes no part in the forward pass"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"


@pytest.mark.parametrize("case", CASES)
def test_longer_than_max_len_raises(case: str, models: dict[str, Classifier]) -> None:
    model = models[case]
    with torch.no_grad():
        model(*batch([MAX_LEN], width=MAX_LEN))  # exactly max_len is allowed
        with pytest.raises(ValueError, match=rf"sequence length {MAX_LEN + 1} exceeds max_len {MAX_LEN}"):
            model(*batch([MAX_LEN + 1], width=MAX_LEN + 1))


def test_mismatched_mask_is_rejected(models: dict[str, Classifier]) -> None:
    ids, mask = batch([4, 4], width=4)
    with pytest.raises(ValueError, match=r"\[batch, sequence\]"):
        models["transformer-pre-mean"](ids, mask[:, :3])


@pytest.mark.parametrize("case", [c for c in CASES if "cosine" in c])
def test_cosine_head_is_bounded_by_its_learnable_scale(case: str, models: dict[str, Classifier]) -> None:
    model = models[case]
    scale = model.get_parameter("head.scale")
    ids, mask = batch([6, 2, 4], width=6, seed=3)
    with torch.no_grad():
        logits, _ = model(ids, mask)
        assert logits.abs().max() <= scale.abs() + 1e-5
        scale.mul_(2.0)
        doubled, _ = model(ids, mask)
        scale.div_(2.0)
    torch.testing.assert_close(doubled, 2.0 * logits)


@pytest.mark.parametrize(
    ("case", "order_aware"),
    [
        ("mean_pool", False),
        ("mean_pool-bigrams", True),
        ("bow_mlp-counts", False),
        ("attention_pool", True),
        ("self_attention-narrow-k", True),
        ("transformer-pre-mean", True),
    ],
)
def test_only_models_with_positions_see_word_order(case: str, order_aware: bool) -> None:
    model = make(case)
    with torch.no_grad():
        # The small initialisation keeps attention near uniform; wider weights make order visible.
        for p in model.parameters():
            p.normal_(0.0, 0.5)
        ids, mask = batch([8], width=8, seed=4)
        logits, _ = model(ids, mask)
        reversed_logits, _ = model(ids.flip(dims=[1]), mask)
    same = torch.allclose(logits, reversed_logits, rtol=1e-5, atol=1e-6)
    assert same != order_aware, (logits, reversed_logits)


@pytest.mark.parametrize("case", CASES)
def test_config_round_trips_through_build_model(case: str, models: dict[str, Classifier]) -> None:
    model = models[case]
    family = model.family
    as_dict = config_to_dict(model.config)
    assert as_dict == dataclasses.asdict(model.config)
    rebuilt = build_model(family, as_dict).eval()
    assert rebuilt.config == model.config and type(rebuilt) is type(model)
    rebuilt.load_state_dict(model.state_dict())
    ids, mask = batch([5, 2], width=5, seed=5)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(ids, mask)[0], model(ids, mask)[0], atol=0, rtol=0)


def test_default_transformer_is_the_published_car_order_model() -> None:
    cfg = TransformerConfig(vocab_size=100)
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.mlp_ratio) == (4, 1, 64, 4)
    assert (cfg.positions, cfg.pooling, cfg.max_len, cfg.num_classes) == ("learned", "mean", 64, 2)


@pytest.mark.parametrize("family", ["transformer", "self_attention"])
def test_word_order_init_scales_queries_and_keys_and_starts_positions_from_sinusoids(family: str) -> None:
    config = {"vocab_size": 30, "d_model": 16, "max_len": 12}
    torch.manual_seed(7)
    plain = build_model(family, {**config, "qk_init_gain": 1.0})
    torch.manual_seed(7)
    sharp = cast(SequenceClassifier, build_model(family, {**config, "qk_init_gain": 2.0}))
    scaled = {n for n, _ in sharp.named_parameters() if n.endswith(("query.weight", "key.weight"))}
    assert scaled, "no query/key projections found"
    for (name, p1), (_, p2) in zip(plain.named_parameters(), sharp.named_parameters(), strict=True):
        factor = 2.0 if name in scaled else 1.0
        torch.testing.assert_close(p2, p1 * factor, atol=0, rtol=0, msg=name)
    torch.testing.assert_close(sharp.positions.table.detach(), sinusoids(12, 16))
    assert abs(float(sharp.embed.weight.detach().std()) - 1.0) < 0.15  # unit-scale word embeddings


@pytest.mark.parametrize(
    ("family", "config", "message"),
    [
        ("lstm", {"vocab_size": 10}, "unknown model family 'lstm'"),
        (
            "transformer",
            {"vocab_size": 10, "layers": 2},
            r"unknown config field\(s\) for transformer: \['layers'\]",
        ),
        ("mean_pool", {}, r"missing required config field\(s\) for mean_pool: \['vocab_size'\]"),
        ("transformer", {"vocab_size": 10, "d_model": 30, "n_heads": 4}, "divisible by n_heads"),
        ("transformer", {"vocab_size": 10, "pooling": "max"}, "pooling must be one of"),
        ("transformer", {"vocab_size": 10, "positions": "none"}, "positions must be one of"),
        ("attention_pool", {"vocab_size": 10, "head": "arcface"}, "head must be one of"),
        ("self_attention", {"vocab_size": 10, "qk_dim": 0}, "qk_dim must be >= 1"),
        ("transformer", {"vocab_size": 10, "qk_init_gain": 0}, "qk_init_gain must be > 0"),
        ("self_attention", {"vocab_size": 10, "qk_init_gain": -1.0}, "qk_init_gain must be > 0"),
        ("bow_mlp", {"vocab_size": 10, "features": "tfidf"}, "features must be one of"),
        ("bow_mlp", {"vocab_size": 10, "num_classes": 1}, "num_classes must be >= 2"),
        ("mean_pool", {"vocab_size": 10, "pad_id": 10}, r"pad_id must be in \[0, vocab_size=10\)"),
        ("mean_pool", {"vocab_size": 10, "dropout": 1.0}, r"dropout must be in \[0, 1\)"),
        ("mean_pool", {"vocab_size": "10"}, "vocab_size must be int, got '10'"),
        ("mean_pool", {"vocab_size": 10, "d_model": True}, "d_model must be int, got True"),
    ],
)
def test_invalid_configs_fail_with_a_clear_message(family: str, config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_model(family, config)


def test_integer_dropout_is_stored_as_float() -> None:
    cfg = build_model("mean_pool", {"vocab_size": 10, "dropout": 0}).config
    assert cfg.dropout == 0.0 and isinstance(cfg.dropout, float)


@pytest.mark.parametrize("case", CASES)
def test_fused_logits_path_matches_the_written_out_attention(case: str) -> None:
    """``logits`` (fused kernel, used to train and score) equals ``forward`` (what export traces)."""
    model = make(case)
    ids, mask = batch([9, 4, 0, 6, 1], width=9, seed=6)  # includes a row with no real token
    with torch.no_grad():
        written_out, _ = model(ids, mask)
        fused = model.logits(ids, mask)
    torch.testing.assert_close(fused, written_out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "case", ["self_attention-narrow-k", "transformer-pre-mean", "transformer-post-cls-sinusoidal"]
)
def test_fused_path_trains_like_the_written_out_one(case: str) -> None:
    """Without dropout both paths give the same loss gradients, so they train the same model."""
    family, extra = CASES[case]
    grads = []
    for fused in (False, True):
        torch.manual_seed(0)
        model = build_model(
            family, {"vocab_size": VOCAB, "max_len": MAX_LEN, "dropout": 0.0, **extra}
        ).train()
        ids, mask = batch([7, 3, 5], width=7, seed=7)
        logits = model.logits(ids, mask) if fused else model(ids, mask)[0]
        torch.autograd.backward(torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1, 0])))
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, written_out in grads[0].items():
        torch.testing.assert_close(grads[1][name], written_out, atol=1e-5, rtol=1e-4, msg=name)
