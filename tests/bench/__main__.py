"""``python -m tests.bench`` (what ``make bench`` runs): see tests/bench/bench.py."""

from tests.bench.bench import main

main()
