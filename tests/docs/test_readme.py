"""The README and the deployment guide state the numbers in force by default.

The numbers live in config/settings.py and are read and phrased by
idempotency/policy.py alone; the documents are prose, so this test is what
keeps them from drifting when a default changes. The README is a map:
this test also keeps it short, and free of figures that belong to
docs/SCALING.md. The defaults are read in a
process of their own, with no IDEMPOTENCY_* or other setting in its
environment, so a developer's exported variables cannot make it pass or fail.
"""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from django.urls import get_resolver

from idempotency import published
from idempotency.schema import all_stored_answers, stored_statuses
from tests.docs.sources import settings_probe

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DEPLOYING = (ROOT / "docs" / "DEPLOYING.md").read_text()
# The answer cell of the policy table's row of a key's first request.
FIRST_REQUEST_ROW = re.compile(r"^\| First request with a key \| ([^|]*) \|", re.MULTILINE)
# "`400 ValidationError`", "`404`": a status, and its code if named.
NAMED_ANSWER = re.compile(r"`(\d{3})(?: (\w+))?`")

_DEFAULTS_SCRIPT = """
import json, django
django.setup()
from django.conf import settings
from api.errors import body_limit_text
from idempotency import policy
print(json.dumps({
    "phrases": {
        "wait": policy.wait_phrase(),
        "retention": policy.retention_phrase(),
        "lock timeout": policy.lock_timeout_phrase(),
        "body limit": body_limit_text(),
    },
    "settings": {
        name: getattr(settings, name)
        for name in (
            "IDEMPOTENCY_KEY_TTL", "IDEMPOTENCY_WAIT", "IDEMPOTENCY_LOCK_TIMEOUT",
            "PAYMENT_RETRY_BACKOFF", "OPERATION_MAX_ATTEMPTS", "OPERATION_STALE_AFTER",
            "OPERATION_LEASE", "OPERATION_RETENTION", "WEBHOOK_TENANT_CONCURRENCY",
        )
    },
}))
"""


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    loaded: dict[str, Any] = settings_probe(_DEFAULTS_SCRIPT, tmp_path_factory)
    return loaded


@pytest.mark.parametrize("phrase", ["wait", "retention", "lock timeout"])
def test_the_readme_names_each_policy_number_as_the_code_does(
    defaults: dict[str, Any], phrase: str
) -> None:
    assert defaults["phrases"][phrase] in README


def test_the_deployment_guide_states_the_body_limit(defaults: dict[str, Any]) -> None:
    assert f"{defaults['phrases']['body limit']}, with `Content-Length` or chunked" in DEPLOYING


def test_the_configuration_table_gives_the_defaults(defaults: dict[str, Any]) -> None:
    for name, value in defaults["settings"].items():
        row = re.search(rf"^\| `{name}` \| `([^`]*)` \|", DEPLOYING, re.MULTILINE)

        assert row is not None, f"{name} has no row in docs/DEPLOYING.md's configuration table"
        # Whole seconds as written (2592000); fractions as short as %g puts them.
        assert row.group(1) == (str(value) if isinstance(value, int) else f"{value:g}"), name


def test_every_manage_py_command_the_documents_name_exists() -> None:
    named = set(re.findall(r"manage\.py (\w+)", README + DEPLOYING))
    listed = subprocess.run(
        [sys.executable, "manage.py", "help", "--commands"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()

    assert named, "the documents name no manage.py command"
    assert named <= set(listed)


def test_the_readmes_manage_py_lines_run_as_printed(tmp_path: Path) -> None:
    # Lines of the README's sh blocks, as a reader pastes them into a fresh
    # clone where `make run` made .venv: with the embedded default database.
    blocks = re.findall(r"^```sh\n(.*?)^```", README, re.MULTILINE | re.DOTALL)
    lines = [
        line
        for block in blocks
        for line in block.splitlines()
        if line.startswith(".venv/bin/python manage.py ")
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "VAR_DIR": str(tmp_path)}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True
    )

    assert lines, "the README shows no manage.py line to run"
    for line in lines:
        argv = [sys.executable, *line.split()[1:]]
        result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
        assert result.returncode == 0, f"{line}\n{result.stderr[-2000:]}"


def test_the_first_request_row_names_the_statuses_commands_store_and_replay() -> None:
    # The URLconf imports every command's schema, which registers what it stores.
    get_resolver().url_patterns  # noqa: B018 - loading it is the point
    row = FIRST_REQUEST_ROW.search(README)

    assert row is not None, "the README's policy table has no 'First request with a key' row"
    named = [(int(status), code) for status, code in NAMED_ANSWER.findall(row.group(1))]
    assert sorted({status for status, _ in named}) == stored_statuses()
    assert {(status, code) for status, code in named if code} <= all_stored_answers()


def test_the_readme_is_a_map_with_where_things_are_first() -> None:
    lines = README.splitlines()
    headings = {line: at for at, line in enumerate(lines, start=1) if line.startswith("## ")}

    assert len(lines) <= 250
    assert headings["## Where to start"] <= 80
    assert headings["## Layout"] <= 80


def test_the_readme_quotes_no_benchmark_figure() -> None:
    # Measured figures live in docs/SCALING.md, with the run they come from.
    figures = re.findall(r"\b\d[\d.,]* ?(?:req/s|ms|µs|MB|kB)\b|\b[01]\.\d\d\b", README)

    assert figures == []


def test_the_quick_loop_paragraph_names_every_marker_make_check_leaves_out() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = {line.split(":")[0] for line in declared["markers"]}
    makefile = (ROOT / "Makefile").read_text()
    (check_markers,) = re.findall(r"^CHECK_MARKERS := (.*)$", makefile, re.MULTILINE)
    paragraph = README.split("### The quick loop")[1].split("```")[0]

    assert set(re.findall(r"not (\w+)", check_markers)) == markers
    assert {marker for marker in markers if f"`{marker}`" not in paragraph} == set()


def test_the_readmes_command_list_is_the_one_the_service_publishes() -> None:
    section = README.split("## The idempotency policy")[1].split("\n## ")[0]
    prose = " ".join(section.split())

    for route in published.command_routes():
        spelled = re.sub(r"\{\w+\}", "{id}", str(route))
        assert f"`{spelled}`" in prose, spelled
