"""The idempotency rules (the API's section 3), one rule after another, and their machinery."""
