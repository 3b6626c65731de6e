"""The recipe for users' own data (``--data``): family and trainer settings measured on real text.

Built-in tasks keep their own recipes (training/data/tasks.py); these apply only with
``--data``, under any flag given. They were chosen on SST-2's validation split (67,349 short
training phrases, 872 sentences; docs/results/sst2.md):
- every sequence family overfit those phrases after the first epoch (validation loss rising
  from epoch 2 while training loss fell), so the recipe keeps the epoch with the lowest
  validation loss and stops 3 epochs after it;
- 25 planned epochs left that first epoch in its warmup and at full learning rate
  (gru_attention: validation 0.790); planning about 3000 steps ends the schedule with the
  epochs that matter;
- the family and its learning rate, weight decay and word dropout (with the width, dropout
  and queries in GRUAttentionConfig) are the best trial of `attnserve-train tune` over every
  family; over 3 seeds it scored 0.824 on validation, mean_pool 0.820, bow_mlp 0.812;
- the tokenizer stays WordLevel: WordPiece and BPE scored 0.805-0.818 on validation against
  its 0.829 (two seeds each); a bag of hashed bigrams (--ngram-buckets) cost 3.9x the CPU
  for no gain on test, so it is not part of the recipe.
"""

from __future__ import annotations

DATA_FAMILY = "gru_attention"
# (TrainConfig field, value) for --data, where no flag sets them.
DATA_TRAINING: tuple[tuple[str, int | float | str], ...] = (
    ("target_steps", 3000),
    ("patience", 3),
    ("select_by", "loss"),
    ("lr", 0.00353),
    ("weight_decay", 0.244),
    ("word_dropout", 0.153),
)
