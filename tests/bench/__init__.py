"""``make bench``: what idempotency costs, as ratios (``python -m tests.bench``)."""
