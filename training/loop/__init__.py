"""The training loop: batches, steps, threads, resumable state and the loop's settings."""
