"""The pairing core: items, relations, pair tables and the store."""
