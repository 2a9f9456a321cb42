"""docs/SPECIFICATION.md holds, and the repository stands on it alone.

The specification names, under each rule, the tests that pin it; these
tests check that every one it names exists, that every rule names one,
that every "§N rule M" cited anywhere in the repository is a rule there,
and that no file points outside the repository for a rule.

A citation that names its rule gives the rule's title after a dash, as the
rule's own heading does: "§3 rule 9 — Crash safety and one transaction",
or "Rule 9 — Crash safety and one transaction" where the section goes
without saying (a module of tests/idempotency); the title must be the
specification's. Inside the specification a bare "rule M" is a rule of
its own section, and one that sits beside a setting or an error code
(`` `IDEMPOTENCY_WAIT` (rule 7) ``, `` (`IDEMPOTENCY_KEY_TTL`, rule 10) ``)
must cite a rule that names it.
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
# A section from its heading to the next one.
_SECTION_BODY = re.compile(r"^## \d+\. .*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
_RULE = re.compile(r"^\*\*Rule (\d+) — ", re.MULTILINE)
_TITLE = re.compile(r"^\*\*Rule (\d+) — (.+?)\.\*\*", re.MULTILINE)
# "§3 rule 9", "docs/SPECIFICATION.md §3 rule 9", "§4 rules 11 to 14",
# "§3 rules 3, 6"; over a line break too, in prose or in a comment.
_CITATION = re.compile(
    r"§(\d+)[\s#]+rules?[\s#]+(\d+(?:(?:,|\s+and|\s+to|\u2013)\s*\d+\b(?!\s*(?:s|ms|%)\b))*)"
)
# A citation that names its rule, as "§3 rule 9 — Crash safety and one
# transaction" does: the name runs, over line breaks, to a colon, a full
# stop, a semicolon, a quote, a bracket, a run of dashes or a blank line.
_NAMED = re.compile(
    r"(?<!\*\*)(?:§(?P<section>\d+)\s+rule|\bRule)\s+(?P<rule>\d+)\s+—\s+"
    r"(?P<name>(?:[^:.;\"()*\n]|\n[ \t#]*(?=[^\s#]))+?)"
    r"(?=\s*[:.;\"()*]|\s+-{2,}|\s*\n\s*\n|\s*\Z)",
)
# A bare "rule 7" or "rules 9 and 10" inside the specification, not part of
# a "§N rule M" citation nor a rule's heading.
_BARE = re.compile(
    r"(?<!§\d )(?<!§\d\d )(?<![\w*])(?:rules?)\s+(\d+(?:(?:,|\s+and|\s+to|\u2013)\s*\d+\b)*)"
)
# A setting or an error code right before a citation: "`IDEMPOTENCY_WAIT`
# (rule 7)", "(`IDEMPOTENCY_KEY_TTL`, rule 10)", "`KeyQuotaExceeded` (§3 rule 12)".
_TERM_BEFORE = re.compile(
    r"`(?:\d{3} )?([A-Z][A-Z0-9_]{2,}|[A-Z][a-z]+(?:[A-Z][a-z]+)+)`(?:\s+\(|,\s+)$"
)


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


def titles() -> dict[int, dict[int, str]]:
    """Section → rule number → the rule's title, as its heading writes it."""
    return {
        section: {
            rule: match[2] for rule, text in numbered.items() if (match := _TITLE.match(text))
        }
        for section, numbered in rules().items()
    }


def _numbers(cited: str) -> list[int]:
    """The rules a citation names: "9", "3, 6", "11 to 14" (its ends), "9 and 10"."""
    return [int(number) for number in re.findall(r"\d+", cited)]


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _same_name(cited: str, title: str) -> bool:
    # Mid-sentence a name may start in lower case.
    return " ".join(cited.split()).lower() == title.lower() and cited[1:] == title[1:]


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
        f"{path.relative_to(ROOT)}:{_line(text, match.start())}: §{match[1]} rule {rule}"
        for path, text in text_files()
        for match in _CITATION.finditer(text)
        for rule in _numbers(match[2])
        if rule not in sections.get(int(match[1]), {})
    ]

    assert dangling == []


def test_every_rule_has_a_title() -> None:
    named = titles()

    for section, numbered in rules().items():
        assert set(named[section]) == set(numbered), f"§{section}: a heading without a title"


def test_every_citation_that_names_its_rule_names_it_as_the_specification_does() -> None:
    named = titles()
    wrong = []
    for path, text in text_files():
        for match in _NAMED.finditer(text):
            # A name wrapped in a comment carries the next line's "#".
            rule, cited = int(match["rule"]), " ".join(match["name"].replace("#", " ").split())
            candidates = (
                [named.get(int(match["section"]), {}).get(rule)]
                if match["section"]
                else [numbered.get(rule) for numbered in named.values()]
            )
            if not any(title and _same_name(cited, title) for title in candidates):
                titled = " or ".join(repr(title) for title in candidates if title)
                wrong.append(
                    f"{path.relative_to(ROOT)}:{_line(text, match.start())}:"
                    f" {match.group(0).strip()!r} names rule {rule} {cited!r};"
                    f" the specification's title is {titled or 'missing'}"
                )

    assert wrong == []


def test_a_bare_rule_in_the_specification_is_one_of_its_section() -> None:
    sections = rules()
    wrong = []
    for start, section in [(m.start(), int(m.group(1))) for m in _SECTION.finditer(SPECIFICATION)]:
        body = _SECTION_BODY.search(SPECIFICATION, start)
        assert body is not None
        for match in _BARE.finditer(body.group(0)):
            before = body.group(0)[max(0, match.start() - 20) : match.start()]
            if re.search(r"§\d+\s+rules?\s+\d+,\s*$", before):
                continue  # "§3 rule 5, rule 14": the second is §3's too
            for rule in _numbers(match[1]):
                if rule not in sections[section]:
                    at = _line(SPECIFICATION, start + match.start())
                    wrong.append(f"SPECIFICATION.md:{at}: §{section} has no rule {rule}")

    assert wrong == []


def test_a_citation_beside_a_setting_or_a_code_cites_a_rule_that_names_it() -> None:
    sections = rules()
    cited: list[tuple[str, int, int, int]] = []  # where, offset, section, rule
    for path, text in text_files():
        for match in _CITATION.finditer(text):
            for rule in _numbers(match[2])[:1]:
                cited.append((str(path.relative_to(ROOT)), match.start(), int(match[1]), rule))
    for start, section in [(m.start(), int(m.group(1))) for m in _SECTION.finditer(SPECIFICATION)]:
        body = _SECTION_BODY.search(SPECIFICATION, start)
        assert body is not None
        for match in _BARE.finditer(body.group(0)):
            cited.append(
                ("docs/SPECIFICATION.md", start + match.start(), section, _numbers(match[1])[0])
            )
    texts = {str(path.relative_to(ROOT)): text for path, text in text_files()}
    wrong = []
    for where, offset, section, rule in cited:
        text = texts[where]
        term = _TERM_BEFORE.search(text[max(0, offset - 80) : offset])
        if term is None or rule not in sections.get(section, {}):
            continue
        if term[1] not in sections[section][rule]:
            wrong.append(
                f"{where}:{_line(text, offset)}: `{term[1]}` cites §{section} rule {rule},"
                f" which does not name it"
            )

    assert wrong == []


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
