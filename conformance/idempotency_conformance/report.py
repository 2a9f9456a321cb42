"""What a run found: one :class:`Result` per check, as text for people or JSON for machines.

The text reads like a pytest run and fits an 80-column terminal: a line
per check, a failure's evidence indented beneath it, a summary last.
"""

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from idempotency_conformance._version import __version__
from idempotency_conformance.target import Exchange

WIDTH = 80
INDENT = " " * 6
# Of an answer's body, what the text shows of a failure and JSON of every exchange.
TEXT_BODY_CHARS = 160
JSON_BODY_CHARS = 2000


class Status(Enum):
    PASS = "PASS"  # noqa: S105 (a verdict, not a password)
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Result:
    """One check's verdict, why, and the exchanges that show it."""

    id: str
    rule: str
    title: str
    status: Status
    reason: str = ""
    exchanges: tuple[Exchange, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True)
class Report:
    """Every check's result, against one API."""

    base_url: str
    command: str
    results: Sequence[Result]
    seconds: float
    notes: Sequence[str] = field(default_factory=tuple)

    def count(self, status: Status) -> int:
        return sum(result.status is status for result in self.results)

    @property
    def passed(self) -> bool:
        """Whether no check failed (a skipped check fails nothing)."""
        return self.count(Status.FAIL) == 0

    def summary(self) -> str:
        return (
            f"{self.count(Status.PASS)} passed, {self.count(Status.SKIP)} skipped, "
            f"{self.count(Status.FAIL)} failed in {self.seconds:.1f}s"
        )


# --- Text ---------------------------------------------------------------------


def render_text(report: Report) -> str:
    """The report as lines of at most 80 columns, ending with a newline."""
    lines = [_clip(f"idempotency-conformance {__version__}: {report.base_url}, {report.command}")]
    lines.extend(_clip(f"  ({note})") for note in report.notes)
    lines.append("")
    for result in report.results:
        lines.extend(_result_lines(result))
    lines.append("")
    lines.append(report.summary())
    return "\n".join(lines) + "\n"


def _result_lines(result: Result) -> list[str]:
    lines = [_clip(f"{result.status.value:<6}{result.id:<21} {result.rule}")]
    if result.status is Status.PASS and not result.reason:
        return lines
    lines.extend(_wrapped(result.reason))
    if result.status is Status.FAIL:
        for exchange in result.exchanges:
            lines.extend(_exchange_lines(exchange))
    return lines


def _exchange_lines(exchange: Exchange) -> list[str]:
    key = "no key" if exchange.key is None else f"key {exchange.key}"
    request = f"> {exchange.method} {exchange.path}  token {exchange.token}  {key}"
    lines = _wrapped(request)
    if exchange.status is None:
        lines.extend(_wrapped(f"< no answer: {exchange.error}"))
        return lines
    headers = "  ".join(f"{name}: {value}" for name, value in exchange.headers.items())
    lines.extend(_wrapped(f"< {exchange.status}  {headers}".rstrip()))
    if exchange.body:
        body = exchange.body.decode("utf-8", "replace")
        if len(body) > TEXT_BODY_CHARS:
            body = body[:TEXT_BODY_CHARS] + "…"
        lines.extend(_wrapped(f"< {body}"))
    return lines


def _wrapped(text: str) -> list[str]:
    if not text:
        return []
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=INDENT,
        subsequent_indent=INDENT + "  ",
        break_long_words=True,
        break_on_hyphens=False,
        replace_whitespace=True,
    )


def _clip(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 1] + "…"


# --- JSON ----------------------------------------------------------------------


def render_json(report: Report) -> str:
    """The report as one JSON document (its shape: conformance/README.md, "JSON report")."""
    document = {
        "tool": "idempotency-conformance",
        "version": __version__,
        "baseUrl": report.base_url,
        "command": report.command,
        "passed": report.passed,
        "summary": {
            "passed": report.count(Status.PASS),
            "skipped": report.count(Status.SKIP),
            "failed": report.count(Status.FAIL),
            "seconds": round(report.seconds, 3),
        },
        "notes": list(report.notes),
        "results": [_result_json(result) for result in report.results],
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def _result_json(result: Result) -> dict[str, Any]:
    return {
        "id": result.id,
        "status": result.status.value,
        "rule": result.rule,
        "title": result.title,
        "reason": result.reason,
        "seconds": round(result.seconds, 3),
        "exchanges": [_exchange_json(exchange) for exchange in result.exchanges],
    }


def _exchange_json(exchange: Exchange) -> dict[str, Any]:
    body = exchange.body.decode("utf-8", "replace")
    return {
        "request": {
            "method": exchange.method,
            "path": exchange.path,
            "idempotencyKey": exchange.key,
            "token": exchange.token,
        },
        "response": None
        if exchange.status is None
        else {
            "status": exchange.status,
            "headers": exchange.headers,
            "replayed": exchange.replayed,
            "body": body[:JSON_BODY_CHARS],
            "bodyTruncated": len(body) > JSON_BODY_CHARS,
        },
        "error": exchange.error,
    }
