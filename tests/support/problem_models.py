"""Tiny Hugging Face classifiers of each problem type (multi-label, regression) made with
transformers from a config, for serving tests: no hub, random weights, a head that spreads
their scores over the texts a test asks."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from tests.export.hf_classifiers import ARCHITECTURES


def problem_folder(root: Path, labels: tuple[str, ...], problem: str, seed: int, texts: list[str]) -> Path:
    """A tiny BERT classifier with `problem_type`, saved as transformers saves one, its scores
    spread over `texts`."""
    arch = ARCHITECTURES["bert"]
    tokenizer = arch.tokenizer_class(tokenizer_object=arch.tokenizer(), model_max_length=512)
    config = arch.config(tokenizer.backend_tokenizer.get_vocab_size(), tokenizer.pad_token_id,
                         dict(enumerate(labels)))  # fmt: skip
    config.problem_type = problem
    torch.manual_seed(seed)
    model = transformers.AutoModelForSequenceClassification.from_config(config).eval()
    # A random encoder's pooled vectors differ little between texts: a large head, centred on
    # these texts, spreads their scores on both sides of 0.
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        model.classifier.weight.mul_(2000.0)
        model.classifier.bias.zero_()
        model.classifier.bias.sub_(model(**encoded).logits.mean(dim=0))
    model.save_pretrained(root)
    tokenizer.save_pretrained(root)
    return root
