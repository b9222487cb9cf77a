"""Encoders, image discovery and decoding, views, and the embedding loop."""
