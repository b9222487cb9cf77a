"""FAISS indices: build, GPU placement, batched exact and approximate search."""
