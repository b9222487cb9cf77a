"""Evaluation of embeddings: kNN, linear probe, retrieval, alignment/uniformity.

Core functions take arrays and return arrays or plain dicts; the CLI
(``pairkit eval``) reads stores and prints. Every neighbour search goes through
:func:`pairkit.index.search.knn_search`, block by block (never N x N).
"""
