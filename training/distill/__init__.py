"""Distillation: a student of any family trained on a teacher run's logits (``attnserve-train distill``)."""
