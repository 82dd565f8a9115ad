"""Parason's thread tags: the words of the parallel-thread grammar. A task that demonstrates
threads owns them (as added tokens); rollout/parallel.py parses traces with them."""

TAGS = ("Parallel", "Outlines", "Subtask", "Trial", "Thread")
TAG_TOKENS = tuple(t for name in TAGS for t in (f"<{name}>", f"</{name}>"))
