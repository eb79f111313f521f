"""Graph optimization: the pass registry, the passes, and memory-aware scheduling."""
