"""docs/SPECIFICATION.md holds, and the repository stands on it alone.

The specification names, under each rule, the tests that pin it; these
tests check that every one it names exists, that every rule names one,
that every "§N rule M" cited anywhere in the repository is a rule there,
and that no file points outside the repository for a rule.
"""

import ast
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SPECIFICATION = (DOCS / "SPECIFICATION.md").read_text()

# `tests/orders/test_payments.py::test_a_payment_is_charged_by_the_worker`
_TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
_SECTION = re.compile(r"^## (\d+)\. ", re.MULTILINE)
_RULE = re.compile(r"^\*\*Rule (\d+) — ", re.MULTILINE)
# "§3 rule 9", "docs/SPECIFICATION.md §3 rule 9"
_CITATION = re.compile(r"§(\d+) rule (\d+)")


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        [shutil.which("git") or "git", "ls-files", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def text_files() -> list[tuple[Path, str]]:
    texts = []
    for path in tracked_files():
        try:
            texts.append((path, path.read_text()))
        except UnicodeDecodeError:
            continue
    return texts


@cache
def defined_tests(path: str) -> frozenset[str]:
    tree = ast.parse((ROOT / path).read_text())
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    )


def rules() -> dict[int, dict[int, str]]:
    """Section → rule number → the rule's text, up to the next rule or section."""
    sections: dict[int, dict[int, str]] = {}
    bounds = [(m.start(), int(m.group(1))) for m in _SECTION.finditer(SPECIFICATION)]
    for index, (start, number) in enumerate(bounds):
        end = bounds[index + 1][0] if index + 1 < len(bounds) else len(SPECIFICATION)
        body = SPECIFICATION[start:end]
        starts = [(m.start(), int(m.group(1))) for m in _RULE.finditer(body)]
        sections[number] = {
            rule: body[at : starts[i + 1][0] if i + 1 < len(starts) else len(body)]
            for i, (at, rule) in enumerate(starts)
        }
    return sections


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_test_a_document_names_exists(document: Path) -> None:
    named = _TEST_REFERENCE.findall(document.read_text())

    missing = [
        f"{path}::{name}"
        for path, name in named
        if not (ROOT / path).is_file() or name not in defined_tests(path)
    ]
    assert missing == []


def test_the_specification_names_tests() -> None:
    assert len(_TEST_REFERENCE.findall(SPECIFICATION)) > 50


def test_every_rule_gives_its_reason_and_names_a_test_that_pins_it() -> None:
    sections = rules()

    assert set(sections) == {1, 2, 3, 4, 5, 6, 7}
    assert len(sections[3]) >= 13
    for section, numbered in sections.items():
        assert list(numbered) == list(range(1, len(numbered) + 1)), f"§{section} numbering"
        for number, text in numbered.items():
            assert "*Why" in text, f"§{section} rule {number} gives no reason"
            assert "*Pinned by:*" in text, f"§{section} rule {number} names no test"
            assert _TEST_REFERENCE.search(text), f"§{section} rule {number} names no test"


def test_every_rule_cited_in_the_repository_exists() -> None:
    sections = rules()
    dangling = [
        f"{path.relative_to(ROOT)}: §{section} rule {rule}"
        for path, text in text_files()
        for section, rule in ((int(s), int(r)) for s, r in _CITATION.findall(text))
        if rule not in sections.get(section, {})
    ]

    assert dangling == []


def test_no_file_points_outside_the_repository_for_its_rules() -> None:
    # Spelled in pieces, so that this file does not name them itself.
    outside = ["CONTRACT" + ".md", "../" + "shared", "kept beside " + "this repository"]

    pointing = [
        f"{path.relative_to(ROOT)}: {name}"
        for path, text in text_files()
        for name in outside
        if name in text
    ]
    assert pointing == []


def test_the_readme_leads_to_the_specification_and_the_checklist() -> None:
    readme = (ROOT / "README.md").read_text()

    assert "(docs/SPECIFICATION.md)" in readme
    assert "(docs/ADDING_A_COMMAND.md)" in readme
