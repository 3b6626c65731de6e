"""A pretrained BERT-family checkpoint in Hugging Face format: its config, weights and tokenizer.

``--pretrained`` names a local folder (config.json, model.safetensors or pytorch_model.bin,
tokenizer.json: what ``save_pretrained`` writes) or a Hub name, looked up in the local cache
first and downloaded only where the Hub answers (never retried for minutes). The checkpoint's
own ``tokenizer.json`` (normalizer, WordPiece or BPE, the ``[CLS] ... [SEP]`` template) is
the run's tokenizer, copied unchanged; everything is checked once here, with one clear
error per problem: a model that is not an encoder, a tokenizer that does not fit it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from attnserve.training.data.core import DataError
from attnserve.training.data.hub import hub_reachable, offline_by_setting

log = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
PAD_TOKENS = ("[PAD]", "<pad>")
# Families whose position ids start after the padding id (RoBERTa's layout): 2 fewer usable.
OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert", "longformer", "data2vec-text", "mpnet")


class PretrainedError(DataError):
    """The pretrained checkpoint cannot be fine-tuned here; the message says why and what to do."""


@dataclass(frozen=True)
class Pretrained:
    source: str  # what --pretrained named
    folder: Path  # the local folder holding config.json, the weights and tokenizer.json
    encoder: dict[str, Any]  # the Hugging Face config, as a plain dict
    tokenizer_path: Path
    tokenizer: Tokenizer
    pad_id: int
    max_positions: int  # the longest input the position table allows


def load_pretrained(source: str) -> Pretrained:
    """Resolve ``source`` (a folder or a Hub name), then check its config and tokenizer."""
    folder = _locate(source)
    encoder = _encoder_config(folder)
    tokenizer_path = folder / TOKENIZER_FILE
    if not tokenizer_path.is_file():
        raise PretrainedError(
            f"{source}: no {TOKENIZER_FILE} in {folder}; attnserve needs the fast tokenizer file: "
            "transformers.AutoTokenizer.from_pretrained(...).save_pretrained(FOLDER) writes one"
        )
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
        raise PretrainedError(f"{tokenizer_path} is not a valid tokenizers JSON file: {exc}") from exc
    pad_id = _check_tokenizer(tokenizer, encoder, source)
    positions = int(encoder.get("max_position_embeddings") or 512)
    if encoder["model_type"] in OFFSET_POSITIONS:
        positions -= 2
    return Pretrained(source, folder, encoder, tokenizer_path, tokenizer, pad_id, positions)


def _locate(source: str) -> Path:
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    # A Hub name is NAME or OWNER/NAME; anything else meant a folder that is not there.
    if path.exists() or source.startswith((".", "/", "~")) or source.count("/") > 1:
        what = "not a folder" if path.exists() else "no such folder"
        raise PretrainedError(f"--pretrained {source}: {what} (a checkpoint folder holds config.json, "
                              f"the weights and {TOKENIZER_FILE})")  # fmt: skip
    return _from_hub(source)


def _from_hub(name: str) -> Path:
    """A Hub model's files: from the local cache when there, else downloaded if the Hub answers."""
    from huggingface_hub import snapshot_download

    patterns = ["config.json", TOKENIZER_FILE, *WEIGHT_FILES]
    try:
        return Path(snapshot_download(name, allow_patterns=patterns, local_files_only=True))
    except Exception as exc:
        cached: Exception = exc
    advice = (
        "download it where there is network (transformers' AutoModel and AutoTokenizer "
        f"from_pretrained('{name}') then save_pretrained(FOLDER)) and pass --pretrained FOLDER"
    )
    offline = "HF_HUB_OFFLINE switches the network off"
    why = offline if offline_by_setting() else hub_reachable(name, kind="models")
    if why is not None:
        raise PretrainedError(
            f"--pretrained {name}: not a local folder nor in the Hugging Face cache, and the Hub "
            f"cannot be used ({why}); {advice}"
        ) from cached
    try:
        return Path(snapshot_download(name, allow_patterns=patterns))
    except Exception as exc:
        raise PretrainedError(
            f"--pretrained {name}: cannot download it: {type(exc).__name__}: {exc}"
        ) from exc


def _encoder_config(folder: Path) -> dict[str, Any]:
    """config.json as a dict, refused unless it describes a bidirectional text encoder."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

    if not (folder / "config.json").is_file():
        raise PretrainedError(f"{folder}: no config.json; is it a Hugging Face checkpoint folder?")
    try:
        config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    except (ValueError, KeyError, OSError) as exc:
        raise PretrainedError(f"{folder}/config.json: {' '.join(str(exc).split())}") from exc
    kind = str(config.model_type)
    # An encoder reads the whole text both ways and was pretrained with masked tokens: the
    # families with a masked-LM head. GPT-style models and encoder-decoders are refused.
    # DistilBERT, ALBERT and MPNet configs carry no is_decoder (transformers 5): none is a decoder.
    decoder = bool(getattr(config, "is_decoder", False))
    if config.is_encoder_decoder or kind not in MODEL_FOR_MASKED_LM_MAPPING_NAMES or decoder:
        what = "an encoder-decoder" if config.is_encoder_decoder else "not a bidirectional encoder"
        raise PretrainedError(
            f"{folder}: model type {kind!r} is {what}; --pretrained takes BERT-family encoders "
            "(bert, roberta, distilbert, electra, deberta, xlm-roberta, ...)"
        )
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise PretrainedError(f"{folder}: no model weights ({' or '.join(WEIGHT_FILES)})")
    encoder: dict[str, Any] = dict(config.to_dict())
    encoder["model_type"] = kind
    return encoder


def _check_tokenizer(tok: Tokenizer, encoder: dict[str, Any], source: str) -> int:
    """The tokenizer's pad id, once it is known to fit the encoder."""
    size, table = tok.get_vocab_size(with_added_tokens=True), int(encoder.get("vocab_size", 0))
    if size > table:
        raise PretrainedError(
            f"{source}: the tokenizer has {size:,} tokens but the model's embedding table only "
            f"{table:,} rows: tokenizer.json belongs to another model"
        )
    probe = tok.encode("a", add_special_tokens=True)
    specials = probe.special_tokens_mask
    if not specials or not (specials[0] and specials[-1] and len(specials) >= 3):
        raise PretrainedError(
            f"{source}: tokenizer.json does not put a class token and a separator around a text "
            f"(got {probe.tokens}); a BERT-family tokenizer adds them, as in [CLS] ... [SEP]"
        )
    padding = tok.padding
    candidates = [padding["pad_id"]] if padding else []
    candidates += [tok.token_to_id(t) for t in PAD_TOKENS]
    configured = encoder.get("pad_token_id")
    candidates += [configured] if isinstance(configured, int) else []
    pad_id = next((int(c) for c in candidates if c is not None and 0 <= int(c) < table), None)
    if pad_id is None:
        raise PretrainedError(f"{source}: the tokenizer has no padding token ([PAD] or <pad>)")
    return pad_id


def load_weights(encoder: torch.nn.Module, folder: Path) -> None:
    """Copy the checkpoint's weights into ``encoder`` (a classifier's body): all of them, or an error."""
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar per load fills a log
    try:
        pretrained, info = AutoModel.from_pretrained(
            str(folder), local_files_only=True, output_loading_info=True
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise PretrainedError(f"{folder}: cannot load the weights: {' '.join(str(exc).split())}") from exc
    missing = [k for k in info.get("missing_keys", ()) if not k.startswith("pooler.")]
    if missing:
        raise PretrainedError(
            f"{folder}: the weights do not fit config.json ({len(missing)} missing, e.g. {missing[0]})"
        )
    state = {k: v for k, v in pretrained.state_dict().items() if not k.startswith("pooler.")}
    encoder.load_state_dict(state, strict=True)
