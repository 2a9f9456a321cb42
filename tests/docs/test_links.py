"""Every link between the documents leads somewhere.

The README is a map: what it leaves out it links, so a link to a file or a
section that moved is a hole in the map. Anchors are GitHub's: a heading,
lowercased, with punctuation other than hyphens dropped and spaces made
hyphens.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "client" / "README.md",
    ROOT / "conformance" / "README.md",
    *sorted((ROOT / "docs").rglob("*.md")),
]
# [text](target): inline links, not images' sources checked elsewhere.
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.+)$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchor(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(document: Path) -> set[str]:
    text = _FENCE.sub("", document.read_text())
    return {anchor(heading) for heading in _HEADING.findall(text)}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_section_that_exist(document: Path) -> None:
    text = _FENCE.sub("", document.read_text())
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # another site's
        path, _, fragment = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        missing_section = (
            linked.exists()
            and bool(fragment)
            and linked.suffix == ".md"
            and fragment not in anchors_of(linked)
        )
        if not linked.exists() or missing_section:
            broken.append(target)

    assert broken == []
