"""The idempotency rules (docs/SPECIFICATION.md §3), one rule after another, and their machinery."""
