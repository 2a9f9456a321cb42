"""The command line: exit status, the text report's width, the JSON report's shape.

It runs as a user runs it, in a process of its own (the console script
that `pip install -e conformance` writes, and ``python -m``), against the
reference API served from this process.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

from idempotency_conformance import CHECKS

from tests.conformance.reference_server import Break, reference_server

SCRIPT = Path(sys.executable).with_name("idempotency-conformance")
TOKENS = ["--token", "alice-token", "--other-token", "bob-token"]


def run(*args: str, script: bool = False) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if script else [sys.executable, "-m", "idempotency_conformance"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_conforming_api_exits_0_with_a_report_that_fits_80_columns() -> None:
    with reference_server() as base_url:
        result = run("--base-url", base_url, *TOKENS, script=True)

    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert [line for line in lines if len(line) > 80] == []
    assert [line.split()[:2] for line in lines if line[:4] == "PASS"] == [
        ["PASS", check.id] for check in CHECKS
    ]
    assert lines[-1].startswith(f"{len(CHECKS)} passed, 0 skipped, 0 failed in ")


def test_a_broken_api_exits_1_and_its_failures_fit_80_columns_too() -> None:
    with reference_server(Break.REPLAY_UNMARKED, Break.INVALID_KEYS_ACCEPTED) as base_url:
        result = run("--base-url", base_url, *TOKENS)

    lines = result.stdout.splitlines()
    assert result.returncode == 1, result.stdout + result.stderr
    assert [line for line in lines if len(line) > 80] == []
    assert "FAIL  replay-success        draft §2.6, spec §3 rule 5" in lines
    assert lines[-1].startswith("7 passed, 0 skipped, 6 failed in ")


def test_the_json_report_has_each_checks_id_status_and_rule() -> None:
    with reference_server(Break.KEYS_NOT_SCOPED) as base_url:
        result = run("--base-url", base_url, *TOKENS, "--json")

    report = json.loads(result.stdout)
    assert result.returncode == 1
    assert report["passed"] is False
    assert report["summary"] | {"seconds": 0} == {
        "passed": len(CHECKS) - 1,
        "skipped": 0,
        "failed": 1,
        "seconds": 0,
    }
    assert [(r["id"], r["rule"]) for r in report["results"]] == [(c.id, c.rule) for c in CHECKS]
    failed = [r for r in report["results"] if r["status"] == "FAIL"]
    assert [r["id"] for r in failed] == ["other-principal"]
    (exchange, *_) = failed[0]["exchanges"]
    assert exchange["request"]["method"] == "POST"
    assert exchange["request"]["idempotencyKey"].startswith('"other-principal-')
    assert exchange["response"]["status"] == 201


def test_options_it_cannot_use_exit_2() -> None:
    result = run("--base-url", "http://127.0.0.1:9", "--token", "t", "--vary", "/nope")

    assert result.returncode == 2
    assert "/nope names nothing in the body" in result.stderr
    assert result.stdout == ""


README = Path(__file__).resolve().parents[2] / "conformance" / "README.md"


def test_the_readme_shows_the_report_and_the_checks_as_the_kit_has_them() -> None:
    text = README.read_text()
    shown = [line for line in text.splitlines() if line.startswith("PASS  ")]
    described = re.findall(r"^\d+\. \*\*`([\w-]+)`\*\* \(([^)]*)\)", text, re.MULTILINE)

    with reference_server() as base_url:
        printed = run("--base-url", base_url, *TOKENS).stdout.splitlines()

    assert shown
    assert set(shown) <= set(printed)
    assert described == [(check.id, check.rule) for check in CHECKS]
