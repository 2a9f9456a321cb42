"""The protocol reads as its protocol: the wire-level work lives beside it.

``idempotency/commands.py`` says what happens to a command under a key, in
steps; how each step reaches PostgreSQL (the statements, the transaction's
``BEGIN`` and ``COMMIT`` riding on them, psycopg's state) is
``idempotency/statements.py``'s. A change to the protocol then reads one
screen, and a speed trick in the statements can be removed without
touching it. These tests fail when SQL or a driver call creeps back.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL = ROOT / "idempotency" / "commands.py"
SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|BEGIN|COMMIT|ROLLBACK|SET LOCAL)\b")


def _strings(tree: ast.AST) -> list[str]:
    # Docstrings included: they speak of the steps in words, not statements.
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_the_protocol_holds_no_sql_text() -> None:
    tree = ast.parse(PROTOCOL.read_text())

    assert [text for text in _strings(tree) if SQL.search(text)] == []


def test_the_protocol_makes_no_driver_call() -> None:
    tree = ast.parse(PROTOCOL.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    calls = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }

    assert "psycopg" not in imported
    assert calls.isdisjoint({"execute", "executemany", "fetchone", "fetchall", "raw"})


def test_the_protocol_fits_in_a_sitting() -> None:
    # What a newcomer reads to change the protocol, in one sitting. Past
    # it, something of the wire has come back, or a new concern wants a
    # module of its own.
    assert len(PROTOCOL.read_text().splitlines()) <= 350
