"""What ``--to-hf`` writes: an encoder run as transformers' own sequence classifier and tokenizer.

The run's encoder *is* a transformers base model (``build_encoder``: ``AutoModel`` of the
checkpoint's config), so its weights go into ``AutoModelForSequenceClassification``'s base
model under transformers' own names, the inverse of what ``--pretrained`` did
(training/text/pretrained.py ``load_weights``), with no renaming table to get wrong.

The head is where the two differ. attnserve's ``cls`` head is one linear layer on the [CLS]
vector; every transformers head puts a dense layer and an activation in between (BERT's and
ALBERT's pooler and RoBERTa's, XLM-R's, MPNet's head: tanh; ELECTRA: GELU; DistilBERT:
ReLU). That layer is set to pass the [CLS] vector through unchanged. The encoder's output is
LayerNorm'd, so each component is bounded: ``x_i = beta_i + gamma_i * z_i`` with
``|z_i| <= sqrt(D - 1)``. Within those bounds:

- tanh: the dense layer scales by a small ``s`` and the output layer by ``1 / s``;
  ``tanh(s x) / s = x (1 - (s x)^2 / 3 ...)``, ``s`` chosen for a relative error <= 1e-6;
- ReLU: the dense layer adds the lower bound's negative, so every input is >= 0 and ReLU is
  the identity; the output layer's bias takes the shift back (exact but for float rounding,
  which grows with the shift: the proof below measures it);
- GELU: the same shift plus 6, where ``GELU(y) = y * Phi(y)`` and ``Phi(6) = 1 - 1e-9``.

The written folder is then proven against the run by transformers itself (to_hf.py).
"""

from __future__ import annotations

import inspect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from tokenizers import Tokenizer
from torch import Tensor, nn

from attnserve.export.errors import ExportError
from attnserve.export.hf_folder import ARCHITECTURES, TOKENIZER_CONFIG
from attnserve.service.bundle import Problem, Truncation
from attnserve.training.models.encoder import EncoderClassifier
from attnserve.training.run.checkpoint import LoadedRun

if TYPE_CHECKING:
    from transformers import PreTrainedModel

RELATIVE_ERROR = 1e-6  # tanh's head: the largest relative change of a [CLS] component
GELU_MARGIN = 6.0  # GELU(y) = y * Phi(y) within 1e-9 of y for y >= 6
# Keys of the run's encoder config that describe the checkpoint it started from, not this model.
STALE_KEYS = ("model_type", "architectures", "id2label", "label2id", "num_labels", "problem_type",
              "_name_or_path", "transformers_version")  # fmt: skip
# What transformers 4 and 5 both read as "the tokenizer in tokenizer.json" (5 writes its own name).
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"
UNK_TOKENS, MASK_TOKENS = ("[UNK]", "<unk>"), ("[MASK]", "<mask>")


@dataclass(frozen=True)
class HeadLayout:
    """Where transformers' classifier of a model type keeps its head, and its activation."""

    dense: str  # the layer before the activation (a submodule path)
    out: str  # the output layer
    activation: Literal["tanh", "relu", "gelu"]


_ROBERTA_STYLE = HeadLayout("classifier.dense", "classifier.out_proj", "tanh")
HEADS = {
    "bert": HeadLayout("bert.pooler.dense", "classifier", "tanh"),
    "albert": HeadLayout("albert.pooler", "classifier", "tanh"),
    "roberta": _ROBERTA_STYLE,
    "xlm-roberta": _ROBERTA_STYLE,
    "mpnet": _ROBERTA_STYLE,
    "electra": HeadLayout("classifier.dense", "classifier.out_proj", "gelu"),
    "distilbert": HeadLayout("pre_classifier", "classifier", "relu"),
}
assert set(HEADS) <= set(ARCHITECTURES)  # what --to-hf writes, `attnserve-export OUT` imports


def build_classifier(run: LoadedRun) -> PreTrainedModel:
    """transformers' classifier computing the run's logits (eval mode, float32, not yet saved)."""
    from transformers import AutoConfig, AutoModelForSequenceClassification

    model = run.model
    assert isinstance(model, EncoderClassifier)  # to_hf.py refuses every other run first
    encoder = model.config.encoder
    model_type = str(encoder["model_type"])
    settings = {key: value for key, value in encoder.items() if key not in STALE_KEYS}
    config = AutoConfig.for_model(
        model_type,
        **settings,
        architectures=[ARCHITECTURES[model_type]],
        id2label=dict(enumerate(run.labels)),
        label2id={label: i for i, label in enumerate(run.labels)},
        problem_type=problem_type(run).value,
    )
    classifier: PreTrainedModel = AutoModelForSequenceClassification.from_config(config)
    # The run dropped the base model's pooler (not its head); the head below sets it.
    loaded = classifier.base_model.load_state_dict(model.encoder.state_dict(), strict=False)
    missing = [key for key in loaded.missing_keys if not key.startswith("pooler")]
    if missing or loaded.unexpected_keys:
        raise ExportError(
            f"the run's encoder does not fit transformers' {ARCHITECTURES[model_type]}: "
            f"missing {missing[:3]}, unexpected {loaded.unexpected_keys[:3]}"
        )
    _fit_head(classifier, HEADS[model_type], model.classifier, *_output_range(model.encoder))
    return classifier.float().eval()


def problem_type(run: LoadedRun) -> Problem:
    """A sigmoid per label for a multi-label run, else one softmax: transformers' own word for it."""
    # getattr: runs saved before multi-label training existed have no such field.
    return Problem.MULTI_LABEL if getattr(run, "multi_label", False) else Problem.SINGLE_LABEL


def _output_range(encoder: nn.Module) -> tuple[Tensor, Tensor]:
    """[D] each: the least and the greatest each component of the encoder's output can be (its
    last LayerNorm's ``beta -+ |gamma| * sqrt(D - 1)``)."""
    norms = [module for module in encoder.modules() if isinstance(module, nn.LayerNorm)]
    if not norms or norms[-1].weight is None or norms[-1].bias is None:
        raise ExportError(
            "the run's encoder does not end in a LayerNorm with weights: its head cannot be mapped"
        )
    gamma, beta = norms[-1].weight.detach().double(), norms[-1].bias.detach().double()
    spread = gamma.abs() * math.sqrt(gamma.numel() - 1)
    return beta - spread, beta + spread


@torch.no_grad()
def _fit_head(
    classifier: nn.Module, layout: HeadLayout, linear: nn.Linear, low: Tensor, high: Tensor
) -> None:
    """Set transformers' head so that it computes ``linear`` of [CLS] (module docstring)."""
    dense, out = classifier.get_submodule(layout.dense), classifier.get_submodule(layout.out)
    assert isinstance(dense, nn.Linear) and isinstance(out, nn.Linear)
    weight, bias = linear.weight.detach().double(), linear.bias.detach().double()  # [C, D], [C]
    eye = torch.eye(weight.shape[1], dtype=torch.float64)  # [D, D]
    if layout.activation == "tanh":
        scale = math.sqrt(3 * RELATIVE_ERROR) / float(torch.maximum(low.abs(), high.abs()).max())
        parts = (eye * scale, torch.zeros_like(low), weight / scale, bias)
    else:
        shift = (-low).clamp(min=0) + (GELU_MARGIN if layout.activation == "gelu" else 0.0)  # [D]
        parts = (eye, shift, weight, bias - weight @ shift)
    for target, value in zip((dense.weight, dense.bias, out.weight, out.bias), parts, strict=True):
        target.copy_(value.to(target.dtype))


def input_names(classifier: PreTrainedModel) -> list[str]:
    """What the tokenizer returns: no token_type_ids for a model that takes none (DistilBERT),
    so that ``model(**tokenizer(texts))`` works."""
    names = ["input_ids", "token_type_ids", "attention_mask"]
    return [n for n in names if n in inspect.signature(classifier.forward).parameters]


def save_tokenizer(run: LoadedRun, folder: Path, truncation: Truncation, model_inputs: list[str]) -> None:
    """The run's tokenizer.json as transformers loads it: its special tokens named, the run's
    max_len as model_max_length, cut on the run's side."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer.from_file(str(run.tokenizer_path))
    tokenizer.no_padding()  # transformers pads and truncates per call, from tokenizer_config.json
    tokenizer.no_truncation()
    specials = special_tokens(tokenizer, run.pad_id)
    PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        model_max_length=run.max_len,
        truncation_side="left" if truncation == "tail" else "right",
        padding_side="right",
        model_input_names=model_inputs,
        **specials,
    ).save_pretrained(str(folder))
    config_path = folder / TOKENIZER_CONFIG
    config: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = TOKENIZER_CLASS
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # transformers 5 reads the names from tokenizer_config.json; older versions from this file.
    (folder / SPECIAL_TOKENS_MAP).write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")


def special_tokens(tokenizer: Tokenizer, pad_id: int) -> dict[str, str]:
    """cls/sep as the template puts them around a text, pad the run's, unk and mask where present."""
    probe = tokenizer.encode("a", add_special_tokens=True)
    pad = tokenizer.id_to_token(pad_id)
    if pad is None or len(probe.tokens) < 3:
        raise ExportError("the run's tokenizer.json has no padding token or no [CLS] ... [SEP] template")
    found = {"cls_token": probe.tokens[0], "sep_token": probe.tokens[-1], "pad_token": pad}
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    model_unk = getattr(tokenizer.model, "unk_token", None)
    for name, candidates in (("unk_token", (model_unk, *UNK_TOKENS)), ("mask_token", MASK_TOKENS)):
        token = next((t for t in candidates if isinstance(t, str) and t in vocab), None)
        if token is not None:
            found[name] = token
    if found["cls_token"] == "<s>":  # RoBERTa's naming: its template's tokens are also bos/eos
        found |= {"bos_token": found["cls_token"], "eos_token": found["sep_token"]}
    return found
