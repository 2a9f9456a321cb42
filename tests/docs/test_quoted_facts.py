"""Every setting's default the documents quote is the code's default.

A default lives in config/settings.py (and, for gunicorn's own variables,
config/gunicorn.py); the documents restate it beside the setting's name, in
one of the forms below, and this test holds each restatement to the code:

- `` `NAME` (30 s) ``, `` `NAME` (default 30 s) ``, `` `NAME` (30 s by default) ``;
- `` `NAME`, 30 s ``, `` `NAME`, default 30 s ``, `` `NAME`, 30 s by default ``;
- a configuration table's row, `` | `NAME` | `30` | ``;
- a multiple, `` twice `NAME`, 60 s `` or `` 3 times `NAME` (90 s) ``: the value
  divided by the factor.

A value is a number with an optional unit (``s``, ``ms``, ``min``, ``h``,
``days``; ``B``, ``KiB``, ``MiB``, ``KB``), converted to the setting's own
unit (seconds, bytes) before it is compared, or ``true``/``false``/
``on``/``off``; ``(86400 s, 24 h)`` checks both. A default mentioned in any
other way is refused, so that it is rephrased rather than missed.

The defaults are read in a process of their own with nothing of the
environment but ``PATH``, so that a developer's exported variables cannot
sway them, and from the source for variables read only on some paths (a
Redis broker's ``CELERY_VISIBILITY_TIMEOUT``).
"""

import ast
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.sources import settings_probe

ROOT = Path(__file__).resolve().parents[2]
SETTINGS_SOURCES = [ROOT / "config" / "settings.py", ROOT / "config" / "gunicorn.py"]

_DEFAULTS_SCRIPT = """
import datetime, json, django
django.setup()
from django.conf import settings
values = {}
for name in dir(settings):
    value = getattr(settings, name)
    if not name.isupper():
        continue
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, bool | int | float):
        values[name] = value
print(json.dumps(values))
"""

Default = bool | int | float

# Seconds or bytes in one of each unit the documents use.
_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1,
    "second": 1,
    "seconds": 1,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "day": 86400,
    "days": 86400,
    "B": 1,
    "bytes": 1,
    "KB": 1000,
    "kB": 1000,
    "MB": 1000**2,
    "KiB": 1024,
    "MiB": 1024**2,
    "GiB": 1024**3,
}
_UNIT = "|".join(sorted(map(re.escape, _UNITS), key=len, reverse=True))
_BOOLEANS = {"true": True, "on": True, "false": False, "off": False}
# "86400", "86,400", "0.05", "`536870912`", with a unit or not; or a boolean.
_VALUE = (
    rf"`?(?:\d{{1,3}}(?:,\d{{3}})+|\d+(?:\.\d+)?)`?(?:\s+(?:{_UNIT})\b)?"
    r"|`?(?:true|false)`?|on\b|off\b"
)
_NAME = r"`(?P<name>[A-Z][A-Z0-9_]{2,})`"
# The forms of a quote, whitespace (line breaks) between any two words.
_QUOTE = re.compile(
    rf"{_NAME}(?:\s+\(|,\s+)(?:default\s+)?(?P<value>{_VALUE})"
    rf"(?P<more>(?:,\s+(?:\d+(?:\.\d+)?\s+(?:{_UNIT})\b))*)"
)
_TABLE_ROW = re.compile(
    rf"^\|\s*{_NAME}\s*\|\s*`(?P<value>[\d.]+)`(?:\s+\((?P<more>[^)|]*)\))?\s*\|", re.MULTILINE
)
# A multiple of a setting, just before its name: "twice", "3 times", and
# "3" with a multiplication sign.
_FACTOR = re.compile(r"(?:\btwice|\b(\d+)\s*(?:\u00d7|times))\s+$")
# A mention of a default this test must be able to read: the name, then
# "default" within the same clause.
_MENTION = re.compile(rf"{_NAME}[^.;:|\n`]{{0,40}}\bdefault\b")


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        ROOT / "client" / "README.md",
    ]


@dataclass(frozen=True)
class Quote:
    where: str
    name: str
    text: str
    values: tuple[Default, ...]


def _number(text: str) -> Default:
    """The seconds, bytes, count or truth a quoted value says."""
    text = text.replace("`", "").strip()
    if text in _BOOLEANS:
        return _BOOLEANS[text]
    number, _, unit = text.partition(" ")
    value = float(number.replace(",", ""))
    return value * _UNITS[unit.strip()] if unit.strip() else value


def _scaled(value: Default, times: int) -> Default:
    return value if isinstance(value, bool) else value / times


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def quotes(known: set[str]) -> list[Quote]:
    found = []
    for path in documents():
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        for pattern in (_QUOTE, _TABLE_ROW):
            for match in pattern.finditer(text):
                if match["name"] not in known:
                    continue
                more = re.findall(rf"\d+(?:\.\d+)?\s+(?:{_UNIT})\b", match["more"] or "")
                factor = _FACTOR.search(text, max(0, match.start() - 12), match.start())
                times = 1 if factor is None else int(factor[1] or 2)
                found.append(
                    Quote(
                        where=f"{where}:{_line(text, match.start())}",
                        name=match["name"],
                        text=" ".join(
                            text[factor.start() if factor else match.start() : match.end()].split()
                        ),
                        values=tuple(_scaled(_number(v), times) for v in [match["value"], *more]),
                    )
                )
    return found


def _evaluate(node: ast.expr) -> Default | str | None:
    """A literal default (``30 * 86400``, ``"45"``); None for anything computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, bool | int | float | str):
        return node.value
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(left, int | float) and isinstance(right, int | float):
            operations = {ast.Mult: left * right, ast.Add: left + right, ast.Sub: left - right}
            return operations.get(type(node.op))
    return None


def source_defaults() -> dict[str, Default]:
    """The literal defaults of the settings' source.

    ``env.int("NAME", default=…)`` and ``os.environ.get("NAME", "…")``.
    """
    found: dict[str, Default] = {}
    for path in SETTINGS_SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if not node.args or not isinstance(node.args[0], ast.Constant):
                continue
            name = node.args[0].value
            default = next((k.value for k in node.keywords if k.arg == "default"), None)
            if default is None and node.func.attr == "get" and len(node.args) == 2:
                default = node.args[1]
            value = None if default is None else _evaluate(default)
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    continue
            if isinstance(name, str) and value is not None:
                found.setdefault(name, value)
    return found


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Default]:
    running: dict[str, Default] = settings_probe(_DEFAULTS_SCRIPT, tmp_path_factory)
    return {**source_defaults(), **running}


def _agrees(quoted: Default, default: Default) -> bool:
    if isinstance(quoted, bool) or isinstance(default, bool):
        return quoted is default
    return math.isclose(quoted, default, rel_tol=1e-9)


def test_the_documents_quote_defaults(defaults: dict[str, Default]) -> None:
    read = quotes(set(defaults))

    # Dozens are quoted: a pattern that stopped matching would pass vacuously.
    assert len(read) > 60, [q.text for q in read]
    assert {"IDEMPOTENCY_LOCK_TIMEOUT", "OPERATION_LEASE", "EVENT_RETENTION"} <= {
        q.name for q in read
    }


def test_every_default_a_document_quotes_is_the_codes(defaults: dict[str, Default]) -> None:
    wrong = [
        f"{q.where}: {q.text!r} says {quoted:g}, the code's default is {defaults[q.name]:g}"
        for q in quotes(set(defaults))
        for quoted in q.values
        if not _agrees(quoted, defaults[q.name])
    ]

    assert wrong == []


def test_every_default_a_document_mentions_is_in_a_form_this_test_reads(
    defaults: dict[str, Default],
) -> None:
    read = {(q.where, q.name) for q in quotes(set(defaults))}
    unread = []
    for path in documents():
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        for match in _MENTION.finditer(text):
            at = f"{where}:{_line(text, match.start())}"
            if match["name"] in defaults and (at, match["name"]) not in read:
                unread.append(f"{at}: {' '.join(match.group(0).split())!r}")

    # Write it `NAME` (default 30 s), or another form the docstring lists.
    assert unread == []
