"""``python -m idempotency_conformance``: the command line."""

from idempotency_conformance.cli import main

raise SystemExit(main())
