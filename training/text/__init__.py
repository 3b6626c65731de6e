"""Text to ids: the tokenizer artifact, its vocabularies and pretrained word vectors."""
