"""The Prometheus rules and example configuration in deploy/prometheus/.

promtool (Debian's prometheus package; .ci/run installs it) checks them and
runs their unit tests. A machine without it fails here rather than
skipping: an unchecked rule file is one whose typo silently turns an alert
off. :func:`metric_names_in_rules` lists what the rules read, for the live
test that holds a running service's scrape to it.
"""

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.live import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
RULE_TESTS = PROMETHEUS / "rules.test.yml"
CONFIG = PROMETHEUS / "prometheus.yml"

SEVERITIES = {"page", "ticket"}
# Patroni names its own metrics so (its REST API's GET /metrics).
PATRONI_PREFIX = "patroni_"


def promtool(*args: str, stdin: str | None = None) -> None:
    """Run promtool in deploy/prometheus/ and fail with its output unless it succeeds."""
    path = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(path).is_file():
        pytest.fail(
            "promtool is not installed: it comes with Debian's prometheus package "
            "(.ci/run installs it; apt-get install prometheus)"
        )
    result = subprocess.run(
        [path, *args], cwd=PROMETHEUS, input=stdin, capture_output=True, text=True
    )
    assert result.returncode == 0, (
        f"promtool {' '.join(args)} exited with status {result.returncode}:\n"
        f"{result.stdout}{result.stderr}"
    )


def rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def alerts() -> list[dict[str, Any]]:
    return [rule for rule in rules() if "alert" in rule]


# --- Metric names in PromQL --------------------------------------------------

_TOKEN = re.compile(
    r"""
      (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
    | (?P<number>\.?\d[\w.]*)  # 0.1, 1e3, 0x1f and durations (5m)
    | (?P<name>[A-Za-z_:][\w:]*)
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
# The keywords whose parentheses hold label names, not an expression.
_LABEL_LISTS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
# PromQL's words that name no metric (case-insensitive, as PromQL reads them).
_KEYWORDS = _LABEL_LISTS | {"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan"}
_CLOSING = {"{": "}", "[": "]", "(": ")"}


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects by name (``foo{…}``, not ``{__name__="foo"}``).

    Skipped: strings, what is between braces (label matchers) and brackets
    (ranges, subqueries), the label lists of ``by``, ``on`` and their kin,
    keywords, and names followed by ``(`` (functions and aggregations).
    """
    tokens = [
        (match.lastgroup, match.group())
        for match in _TOKEN.finditer(expr)
        if match.lastgroup != "space"
    ]
    names = set()
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1][1] if index + 1 < len(tokens) else ""
        if text in ("{", "["):
            index = _after(tokens, index)
            continue
        if kind == "name":
            word = text.lower()
            if word in _LABEL_LISTS and following == "(":
                index = _after(tokens, index + 1)
                continue
            # A function's name, or an aggregation's, whose ``by`` may come first.
            called = following == "(" or following.lower() in ("by", "without")
            if word not in _KEYWORDS and not called:
                names.add(text)
        index += 1
    return names


def _after(tokens: list[tuple[str | None, str]], opening: int) -> int:
    """The index past the token that closes the one at ``opening`` (none of these nest)."""
    closing = _CLOSING[tokens[opening][1]]
    index = opening + 1
    while tokens[index][1] != closing:
        index += 1
    return index + 1


def metric_names_in_rules() -> set[str]:
    """Every metric of the service's the rules read, which a scrape of it must expose.

    Not the recording rules' own series, nor ``up``, which Prometheus writes,
    nor Patroni's (:func:`patroni_metric_names_in_rules`).
    """
    read = set().union(*(metric_names(rule["expr"]) for rule in rules()))
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    return read - recorded - {"up"} - patroni_metric_names_in_rules()


def patroni_metric_names_in_rules() -> set[str]:
    """The metrics of Patroni's the rules read, which its REST API's /metrics must expose."""
    read = set().union(*(metric_names(rule["expr"]) for rule in rules()))
    return {name for name in read if name.startswith(PATRONI_PREFIX)}


def test_the_names_read_are_the_metrics_and_recorded_series_in_an_expression() -> None:
    expr = """
        sum by (route, le) (
          rate(duration_seconds_bucket{job="a", route!~"/(x|y)", le!="{b}"}[5m] offset 1h)
        )
        / on (route) group_left (status) max_over_time(level:thing:ratio[10m:1m]) > bool 0.5
        or absent(up{job="x"} == 1) unless ignoring (instance) left_total atan2 right_total
        AND sum without(x)(spaced_total @ start()) or max by (a) (grouped) or min(x_total) by (b)
        and label_replace(relabelled, "dst", "$1", "src", "(.*)") and 2 * 3600 < inf
    """

    assert metric_names(expr) == {
        "duration_seconds_bucket",
        "level:thing:ratio",
        "up",
        "left_total",
        "right_total",
        "spaced_total",
        "relabelled",
        "grouped",
        "x_total",
    }


def test_the_rules_read_these_metrics_of_the_service() -> None:
    assert metric_names_in_rules() == {
        "events_feed_lag_seconds",
        "http_requests_total",
        "idempotency_outcomes_total",
        "idempotency_purge_lag_seconds",
        "operations_attempts_exhausted_total",
        "operations_oldest_processing_age_seconds",
        "operations_unsettled_oldest_age_seconds",
        "provider_calls_total",
        "service_ready",
        "webhook_deliveries_total",
        "webhook_endpoints_failing",
        "webhook_oldest_pending_delivery_age_seconds",
    }
    assert patroni_metric_names_in_rules() == {"patroni_primary", "patroni_sync_standby"}


# --- promtool ----------------------------------------------------------------


def test_promtool_finds_the_rules_valid() -> None:
    promtool("check", "rules", RULES.name)


def test_the_rules_pass_their_promtool_unit_tests() -> None:
    promtool("test", "rules", RULE_TESTS.name)


def test_promtool_finds_the_example_configuration_valid() -> None:
    promtool("check", "config", CONFIG.name)


# --- What every alert carries ------------------------------------------------


def test_every_alert_waits_and_says_how_urgent_it_is_what_it_means_and_where_its_runbook_is() -> (
    None
):
    for alert in alerts():
        name, labels, annotations = alert["alert"], alert["labels"], alert["annotations"]
        assert "for" in alert, name
        assert labels["severity"] in SEVERITIES, name
        assert annotations["summary"].strip(), name
        assert annotations["description"].strip(), name
        # GitHub's anchor of the runbook's section headed with the alert's name.
        assert annotations["runbook_url"] == f"docs/RUNBOOK.md#{name.lower()}"


def test_every_alert_is_tested_firing_and_silent_and_every_recording_rule_tested() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    alert_tests = [test for case in cases for test in case.get("alert_rule_test", [])]
    fired = {test["alertname"] for test in alert_tests if test["exp_alerts"]}
    silent = {test["alertname"] for test in alert_tests if not test.get("exp_alerts")}
    exprs = {test["expr"] for case in cases for test in case.get("promql_expr_test", [])}
    names = {alert["alert"] for alert in alerts()}

    assert names - fired == set(), "alerts never tested firing"
    assert names - silent == set(), "alerts never tested silent"
    # A test of a misspelt alert expects silence and always gets it.
    assert {test["alertname"] for test in alert_tests} - names == set(), "tests of no alert"
    assert {rule["record"] for rule in rules() if "record" in rule} - exprs == set()


def test_every_alert_has_its_section_in_the_runbook() -> None:
    runbook = (ROOT / "docs" / "RUNBOOK.md").read_text()
    sections = set(re.findall(r"^### (\w+)$", runbook, flags=re.MULTILINE))

    assert {alert["alert"] for alert in alerts()} <= sections
