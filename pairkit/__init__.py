"""pairkit: the data side of contrastive learning on images."""

__version__ = "0.1.0"
