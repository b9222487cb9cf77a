"""Contrastive heads on stored embeddings: heads, losses, pair batches, the training loop."""
