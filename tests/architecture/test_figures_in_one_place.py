"""Measured figures live in docs/SCALING.md; the code keeps the reason and points there.

A speed trick's docstring says why it exists and how to remove it; what it
bought is measured again with every run, so a figure copied into a module
goes stale with the next one. These tests fail on a measured duration in
an app's module, and on a pointer from the code to a section of
docs/SCALING.md that does not exist.
"""

import re
from pathlib import Path

from tests.architecture.test_layers import PACKAGES, ROOT

SCALING = ROOT / "docs" / "SCALING.md"
# A measured duration: microseconds at all, or milliseconds with a fraction
# or a range ("0.4 ms", "58-91 ms"). A setting's round default ("50 ms by
# default") or a histogram's bucket ("from 5 ms") is a choice, not a measure.
_MEASURED = re.compile(
    r"\d+(?:[.,]\d+)?\s?µs|\d+\.\d+\s?ms\b|\d+(?:\.\d+)?\s?[-\u2013]\s?\d+(?:\.\d+)?\s?ms\b"
    r"|\d+(?:\.\d+)? to \d+(?:\.\d+)? times"
)
# The document's path, maybe a comma, and a section's title in quotes or stars.
_POINTER = re.compile(r"docs/SCALING\.md,?\s+[\"*]([^\"*]+)[\"*]")


def _modules(*roots: str) -> list[Path]:
    return [
        path
        for root in roots
        for path in (ROOT / root).rglob("*.py")
        if "migrations" not in path.parts
    ]


def _flat(text: str) -> str:
    """The text with comment markers and line breaks folded, so a pointer may wrap."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)


def test_no_module_quotes_a_measured_duration() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)!r}"
        for path in _modules(*PACKAGES)
        for match in _MEASURED.finditer(_flat(path.read_text()))
    ]

    assert found == []


def test_every_pointer_into_scaling_names_a_section_of_it() -> None:
    sections = {
        line.lstrip("#").strip()
        for line in SCALING.read_text().splitlines()
        if line.startswith("#")
    }
    pointers = {
        (path.relative_to(ROOT).as_posix(), match.group(1))
        for path in _modules(*PACKAGES, "tests")
        for match in _POINTER.finditer(_flat(path.read_text()))
    }

    assert pointers, "no pointer found: the pattern no longer matches how the code writes them"
    assert sorted(p for p in pointers if p[1] not in sections) == []


def test_the_check_sees_a_measured_duration() -> None:
    assert _MEASURED.search("went from 799 to 194 µs of Python")
    assert _MEASURED.search("cost 415-635 ms of Python")
    assert _MEASURED.search("some 0.4 ms of Python")
    assert not _MEASURED.search("with 50 ms a purge of a million keys")
