"""The parts of distillation on their own: the loss, its micro-batched step, the augmentation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attnserve.training.distill.augment import UNK, AugmentConfig, augment_texts
from attnserve.training.distill.loss import NO_LABEL, DistillLoss
from attnserve.training.distill.teacher import TeacherError, label_order
from attnserve.training.loop.batching import Split, batch_tensors, soft_targets
from attnserve.training.loop.step import accumulate_gradients
from attnserve.training.loop.trainer import TrainConfig
from attnserve.training.models import build_model

CPU = torch.device("cpu")


def test_rows_without_a_gold_label_learn_from_the_teacher_alone() -> None:
    logits = torch.tensor([[1.0, -1.0], [0.5, 0.5], [2.0, 0.0]])
    teacher = torch.tensor([[3.0, -3.0], [0.0, 1.0], [2.0, 0.0]])
    labels = torch.tensor([0, NO_LABEL, 1])
    loss = DistillLoss("mse", alpha=0.25)
    rows = loss.rows(logits, teacher, labels)
    mse = ((logits - teacher) ** 2).mean(-1)
    ce = F.cross_entropy(logits, labels.clamp(min=0), reduction="none")
    assert torch.allclose(
        rows, torch.stack([0.25 * mse[0] + 0.75 * ce[0], mse[1], 0.25 * mse[2] + 0.75 * ce[2]])
    )


def test_kl_is_zero_at_the_teacher_and_scaled_by_the_squared_temperature() -> None:
    teacher = torch.tensor([[2.0, -1.0, 0.5]])
    assert float(DistillLoss("kl", 3.0).soft_rows(teacher.clone(), teacher)) == pytest.approx(0.0, abs=1e-6)
    student = torch.tensor([[0.0, 0.0, 0.0]])
    for t in (1.0, 4.0):
        p = torch.softmax(teacher / t, -1)
        expected = (p * (p.log() - torch.log_softmax(student / t, -1))).sum() * t * t
        assert float(DistillLoss("kl", t).soft_rows(student, teacher)) == pytest.approx(
            float(expected), rel=1e-5
        )
    with pytest.raises(ValueError, match="alpha"):
        DistillLoss(alpha=1.5)


def test_a_micro_batched_distillation_step_is_the_whole_batchs_step() -> None:
    rng = np.random.default_rng(0)
    n, width = 12, 16
    lengths = rng.integers(1, width + 1, size=n)
    lengths[0] = width
    ids = rng.integers(3, 40, size=(n, width)) * (np.arange(width)[None, :] < lengths[:, None])
    labels = np.where(rng.random(n) < 0.5, rng.integers(0, 3, size=n), NO_LABEL)
    split = Split(ids.astype(np.int32), lengths, labels, soft=rng.normal(size=(n, 3)).astype(np.float32))
    idx = np.arange(n)
    batch, soft = batch_tensors(split, idx, CPU), soft_targets(split, idx, CPU)
    assert soft is not None
    grads = []
    for max_tokens in (0, 40):
        torch.manual_seed(0)
        model = build_model(
            "gru_attention", {"vocab_size": 40, "num_classes": 3, "max_len": width, "dropout": 0.0}
        )
        model = model.double().train()
        cfg = TrainConfig(max_batch_tokens=max_tokens)
        loss, _ = accumulate_gradients(model, batch, cfg, None, (soft.double(), DistillLoss("kl", 2.0, 0.5)))
        grads.append((loss, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-9)
    assert torch.allclose(grads[0][1], grads[1][1], atol=1e-10)


def test_augmented_texts_mask_swap_by_context_and_keep_n_grams() -> None:
    texts = ["the film was good", "the plot was good", "the cast was dull", "the film was dull"] * 5
    only_masks = augment_texts(texts, AugmentConfig(copies=3, p_mask=0.5, p_swap=0, p_ngram=0), "[MASK]")
    for student, teacher in zip(only_masks.student, only_masks.teacher, strict=True):
        assert student.replace(UNK, "[MASK]") == teacher and UNK in student
        assert len(student.split()) == 4
    swapped = augment_texts(texts, AugmentConfig(copies=5, p_mask=0, p_swap=1, p_ngram=0))
    # "film", "plot" and "cast" fill the slot between "the" and "was"; "good" and "dull" the last one.
    for text in swapped.student:
        first, noun, verb, adjective = text.split()
        assert (
            (first, verb) == ("the", "was")
            and noun in {"film", "plot", "cast"}
            and adjective in {"good", "dull"}
        )
    grams = augment_texts(texts, AugmentConfig(copies=5, p_mask=0, p_swap=0, p_ngram=1))
    assert grams.student and all(" ".join(t.split()) in " ".join(texts) for t in grams.student)
    assert all(len(t.split()) < 4 or t not in texts for t in grams.student)  # originals are dropped
    assert augment_texts(texts, AugmentConfig(2, seed=4)) == augment_texts(texts, AugmentConfig(2, seed=4))


def test_labels_are_matched_by_name() -> None:
    assert label_order(["neg", "pos"], ["pos", "neg"]).tolist() == [1, 0]
    with pytest.raises(TeacherError, match=r"\['a', 'b'\] differ from the data's \['a', 'c'\]"):
        label_order(["a", "b"], ["a", "c"])
