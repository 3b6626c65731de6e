"""Training data: built-in tasks, users' files and Hugging Face datasets, and augmentations.

Every source yields a ``Dataset`` of ``Example`` rows split into train / val / test (plus
extra evaluation splits such as car-order's ``template_heldout``, ``phrasing_heldout``
``handwritten`` and ``handwritten_blind``), with class names in id order.
"""

from __future__ import annotations

from attnserve.training.data.augment import add_distractor_prefix, with_distractor_prefix, word_dropout
from attnserve.training.data.core import DataError, Dataset, Example, split_groups, words
from attnserve.training.data.files import Layout, Part, load_file, load_hf_dataset, load_parts
from attnserve.training.data.tasks import (
    DEFAULTS,
    EVAL_SPLITS,
    HANDWRITTEN,
    HANDWRITTEN_BLIND,
    PHRASING_HELDOUT,
    TASKS,
    TEMPLATE_HELDOUT,
    load_task,
)

__all__ = [
    "DEFAULTS",
    "EVAL_SPLITS",
    "HANDWRITTEN",
    "HANDWRITTEN_BLIND",
    "PHRASING_HELDOUT",
    "TASKS",
    "TEMPLATE_HELDOUT",
    "DataError",
    "Dataset",
    "Example",
    "Layout",
    "Part",
    "add_distractor_prefix",
    "load_file",
    "load_hf_dataset",
    "load_parts",
    "load_task",
    "split_groups",
    "with_distractor_prefix",
    "word_dropout",
    "words",
]
