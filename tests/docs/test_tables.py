"""The documents' tables of codes, commands, metrics and alerts, held to the code.

Each table is prose a reader trusts, and each is a copy of something the
code decides: the error codes the service answers, the routes that want an
``Idempotency-Key``, the metrics it exports and the alerts written on them.
A copy drifts the day the code changes, so each is read here and compared
with what the code has: the specification's error table (§2 rule 8) with
every ``ApplicationError`` and every code the service gives DRF's and
gunicorn's refusals; the command lists of the specification (§3) and the
README with the routes ``@idempotent_command`` guards and with
``GET /v1/idempotency-policy``; the runbook's metrics table with the
metrics the packages define, and its alert sections with
deploy/prometheus/rules.yml, the rules' waits and thresholds included
where a section states them.
"""

import ast
import json
import re
from pathlib import Path
from typing import Any

from django.test import Client

from api.errors import _DRF_CODES, ApplicationError
from api.gunicorn_worker import _PROBLEMS
from idempotency import published
from tests.docs.sources import SERVICE_PACKAGES
from tests.observability.test_alert_rules import alerts, metric_names, rules

ROOT = Path(__file__).resolve().parents[2]
SPECIFICATION = (ROOT / "docs" / "SPECIFICATION.md").read_text()
README = (ROOT / "README.md").read_text()
RUNBOOK = (ROOT / "docs" / "RUNBOOK.md").read_text()


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line), up to the next heading of its level."""
    level = heading.split(" ")[0]
    assert f"\n{heading}\n" in text, f"no section {heading!r}"
    after = text.split(f"\n{heading}\n", 1)[1]
    return re.split(rf"^{level} ", after, maxsplit=1, flags=re.MULTILINE)[0]


# --- Error codes ---------------------------------------------------------------

# A row of the specification's error table: "| 405, 406, 415 | `MethodNotAllowed`, … |".
_ERROR_ROW = re.compile(r"^\| (\d{3}(?:, \d{3})*) \| (.*) \|$", re.MULTILINE)
# A code in a cell, told from the cell's notes (`details`, `Retry-After`, `API_THROTTLE_RATE`).
_CODE = re.compile(r"`([A-Z][a-z]+(?:[A-Z][a-z]*)*)`")


def error_classes() -> dict[str, tuple[int, str]]:
    """Every ``ApplicationError`` subclass of the service's packages: its status and code.

    Read from the source, so that a class defined next to a service that no
    URL imports is found too, and nothing is imported for its side effects
    (config's modules set up processes). A class that sets neither inherits
    its base's; classes are told by name, which the packages do not reuse.
    """
    defined: dict[str, tuple[str, dict[str, object]]] = {}
    for package in SERVICE_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef) and node.bases:
                    base = node.bases[0]
                    attributes: dict[str, object] = {
                        target.id: statement.value.value
                        for statement in node.body
                        if isinstance(statement, ast.Assign)
                        and isinstance(statement.value, ast.Constant)
                        for target in statement.targets
                        if isinstance(target, ast.Name)
                    }
                    if isinstance(base, ast.Name):
                        defined[node.name] = (base.id, attributes)
    found = {"ApplicationError": (ApplicationError.status_code, ApplicationError.code)}
    grew = True
    while grew:
        grew = False
        for name, (parent, attributes) in defined.items():
            if parent in found and name not in found:
                status, code = found[parent]
                status_code, named = (
                    attributes.get("status_code", status),
                    attributes.get("code", code),
                )
                assert isinstance(status_code, int), name
                assert isinstance(named, str), name
                found[name] = (status_code, named)
                grew = True
    # ApplicationError itself is an abstract base: nothing raises it bare.
    del found["ApplicationError"]
    return found


def answered_codes() -> set[tuple[int, str]]:
    """Every (status, code) the service answers with a problem body."""
    classes = set(error_classes().values())
    drf = {(cls.status_code, code) for cls, code, _ in _DRF_CODES}
    # What gunicorn refuses before the application reads the request.
    gunicorn = {(status, code) for status, (code, _, _) in _PROBLEMS.items()}
    return classes | drf | gunicorn


def tabled_codes() -> set[tuple[int, str]]:
    """The (status, code) pairs of the specification's table of error codes (§2 rule 8)."""
    table = SPECIFICATION.split("**Rule 8 — Error codes.**", 1)[1].split("\n\n", 2)[1]
    pairs = set()
    for statuses_cell, codes_cell in _ERROR_ROW.findall(table):
        statuses = [int(status) for status in statuses_cell.split(", ")]
        # A code's note, in parentheses, may quote a header (`Expect`).
        codes = _CODE.findall(re.sub(r"\([^)]*\)", "", codes_cell))
        if len(statuses) > 1:
            # Several statuses in one row name one code each, in order.
            assert len(codes) == len(statuses), f"row {statuses_cell}: one code per status"
            pairs |= set(zip(statuses, codes, strict=True))
        else:
            pairs |= {(statuses[0], code) for code in codes}
    return pairs


def test_the_specifications_error_table_lists_every_code_the_service_answers() -> None:
    answered, tabled = answered_codes(), tabled_codes()

    assert answered - tabled == set(), "answered by the service, missing from §2 rule 8's table"
    assert tabled - answered == set(), "in §2 rule 8's table, answered by nothing in the code"


# --- Commands ------------------------------------------------------------------

# "`POST /v1/orders`", "`DELETE /v1/webhook-endpoints/{id}`"
_COMMAND = re.compile(r"`((?:POST|PUT|PATCH|DELETE) /v1/[^`]*)`")
_LISTS_COMMANDS = "Every state-changing request under `/v1/`"


def guarded_routes() -> set[str]:
    """Every route ``@idempotent_command`` guards, each parameter spelled ``{id}`` as docs do."""
    return {re.sub(r"\{\w+\}", "{id}", str(route)) for route in published.command_routes()}


def listed_commands(document: str) -> set[str]:
    """The commands a document lists in its paragraph on what a command is."""
    assert _LISTS_COMMANDS in document, f"no paragraph starts {_LISTS_COMMANDS!r}"
    paragraph = document.split(_LISTS_COMMANDS, 1)[1].split("\n\n", 1)[0]
    return set(_COMMAND.findall(" ".join(paragraph.split())))


def test_the_specification_lists_every_guarded_route_as_a_command_and_no_other() -> None:
    assert listed_commands(section(SPECIFICATION, "## 3. Idempotent commands")) == guarded_routes()


def test_the_readme_lists_every_guarded_route_as_a_command_and_no_other() -> None:
    assert listed_commands(README) == guarded_routes()


def test_the_published_policy_lists_every_guarded_route() -> None:
    # No database: the policy is settings and routes.
    response = Client().get("/v1/idempotency-policy")
    commands = json.loads(response.content)["commands"]

    assert response.status_code == 200
    assert [(c["method"], c["path"]) for c in commands] == [
        (route.method, route.path) for route in published.command_routes()
    ]
    assert {re.sub(r"\{\w+\}", "{id}", f"{c['method']} {c['path']}") for c in commands} == (
        listed_commands(SPECIFICATION)
    )


# --- Metrics -------------------------------------------------------------------

# What a metric's constructor is, to the runbook's Type column.
_METRIC_TYPES = {
    "Counter": "counter",
    "Histogram": "histogram",
    "Gauge": "gauge",
    "GaugeMetricFamily": "gauge, at scrape",
    "CounterMetricFamily": "counter, at scrape",
}
# "| `http_requests_total` | counter | …"
_METRIC_ROW = re.compile(r"^\| `([a-z_]+)` \| ([^|]+) \|", re.MULTILINE)
# A series a PromQL expression of the runbook's selects, the service's or a
# recording rule's (with colons): a name before "{" or "[".
_SELECTED = re.compile(r"([a-z_][a-z0-9_:]*)[{\[]")
# A metric the runbook names in a code span: the suffixes its names end with.
_NAMED = re.compile(r"`([a-z][a-z0-9_]*_(?:total|seconds|rows|failing|unsettled|attempts))`")
_HISTOGRAM_SERIES = re.compile(r"_(?:bucket|count|sum)$")


def defined_metrics() -> dict[str, str]:
    """Every metric the service's packages define, by name, with its type as the runbook puts it."""
    defined = {}
    for package in SERVICE_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and node.args):
                    continue
                constructor = getattr(node.func, "id", getattr(node.func, "attr", None))
                name = node.args[0]
                if constructor in _METRIC_TYPES and isinstance(name, ast.Constant):
                    # prometheus_client exposes a counter under its name with _total.
                    suffix = "_total" if constructor == "Counter" else ""
                    exposed = str(name.value).removesuffix("_total") + suffix
                    defined[exposed] = _METRIC_TYPES[constructor]
    return defined


def tabled_metrics() -> dict[str, str]:
    return dict(_METRIC_ROW.findall(section(RUNBOOK, "## The metrics")))


def recorded_series() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def test_the_runbooks_metrics_table_lists_every_metric_the_service_defines_with_its_type() -> None:
    defined, tabled = defined_metrics(), tabled_metrics()

    assert len(defined) >= 20, "the walk found too few metrics to be reading the code"
    assert set(defined) - set(tabled) == set(), "defined, missing from the runbook's table"
    assert set(tabled) - set(defined) == set(), "in the runbook's table, defined nowhere"
    assert {name: kind for name, kind in tabled.items() if defined[name] != kind} == {}


def test_every_metric_the_runbook_or_the_rules_name_exists() -> None:
    exists = set(defined_metrics()) | recorded_series()
    # Patroni's own (job "patroni") and Prometheus's `up`.
    foreign = {"up", "patroni_primary", "patroni_sync_standby"}
    in_runbook = {
        _HISTOGRAM_SERIES.sub("", name)
        for name in _SELECTED.findall(RUNBOOK) + _NAMED.findall(RUNBOOK)
    }
    in_rules = {
        _HISTOGRAM_SERIES.sub("", name) for rule in rules() for name in metric_names(rule["expr"])
    }

    assert in_runbook, "the runbook names no metric"
    assert in_runbook - exists - foreign == set(), "named in docs/RUNBOOK.md, exported by nothing"
    assert in_rules - exists - foreign == set(), (
        "read by deploy/prometheus/rules.yml, exported by nothing"
    )


# --- Alerts --------------------------------------------------------------------

_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "five": 5, "ten": 10}
_UNITS = {"minute": 60, "hour": 3600}
_SPAN = r"(\d+|a|an|one|two|three|five|ten) (minute|hour)s?"
# "for 5 minutes", "for an hour": the rule's `for`; "for over 10 minutes",
# "over 3 hours ago": its threshold, in seconds; "in the last 10 minutes":
# a range of its expression; "over 10 %": its threshold, a share.
_FOR = re.compile(rf"\bfor {_SPAN}\b")
_OVER = re.compile(rf"\b(?:for over {_SPAN}|over {_SPAN} ago)\b")
_LAST = re.compile(r"\bin the last (?:(\d+) (minute|hour)s|(hour))\b")
_SHARE = re.compile(r"\bover (\d+) %")
_DURATION = re.compile(r"^(\d+)([smh])$")
_THRESHOLD = re.compile(r"> ([\d.]+(?: \* [\d.]+)?)")


def seconds(count: str, unit: str) -> int:
    return (int(count) if count.isdigit() else _NUMBERS[count]) * _UNITS[unit]


def duration_seconds(duration: str) -> int:
    match = _DURATION.match(duration)
    assert match is not None, duration
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def threshold(expr: str) -> float:
    """The first number an alert's expression compares its series above: ``> 3 * 3600``."""
    match = _THRESHOLD.search(expr)
    assert match is not None, expr
    value = 1.0
    for factor in match.group(1).split(" * "):
        value *= float(factor)
    return value


def meaning(name: str) -> str:
    """What fires an alert: the first sentence of its section's *Means:*, on one line.

    The rest of the paragraph tells what else is going on, and may quote
    another alert's wait (the alert that follows this one, and when).
    """
    text = section(section(RUNBOOK, "## The alerts"), f"### {name}")
    paragraph = " ".join(text.split("*Means:*", 1)[1].split("\n\n", 1)[0].split())
    return re.split(r"\.\s+(?=[A-Z`*(])", paragraph, maxsplit=1)[0]


def stated_against_rule(alert: dict[str, Any]) -> list[tuple[str, float, float]]:
    """Each wait or threshold the alert's section states: (the phrase, as stated, as ruled)."""
    means, expr = meaning(alert["alert"]), alert["expr"]
    ranges = {duration_seconds(r) for r in re.findall(r"\[(\d+[smh])\]", expr)}
    checks: list[tuple[str, float, float]] = []
    for match in _FOR.finditer(means):
        checks.append((match.group(), seconds(*match.groups()), duration_seconds(alert["for"])))
    for match in _OVER.finditer(means):
        count, unit = match.group(1, 2) if match.group(1) else match.group(3, 4)
        checks.append((match.group(), seconds(count, unit), threshold(expr)))
    for match in _LAST.finditer(means):
        stated = seconds(*match.group(1, 2)) if match.group(1) else 3600
        ruled = stated if stated in ranges else min(ranges, default=0)
        checks.append((match.group(), stated, ruled))
    for match in _SHARE.finditer(means):
        checks.append((match.group(), float(match.group(1)), round(threshold(expr) * 100, 6)))
    return checks


def test_every_alert_section_of_the_runbook_is_an_alert_of_the_rules() -> None:
    sections = set(re.findall(r"^### (\w+)$", section(RUNBOOK, "## The alerts"), re.MULTILINE))

    assert sections == {alert["alert"] for alert in alerts()}


def test_the_waits_and_thresholds_the_runbook_states_are_the_rules() -> None:
    checks = {alert["alert"]: stated_against_rule(alert) for alert in alerts()}
    wrong = {
        name: [(phrase, ruled) for phrase, stated, ruled in stated_list if stated != ruled]
        for name, stated_list in checks.items()
    }

    # Most sections state their wait or threshold; a pattern that stopped
    # matching them would pass by checking nothing.
    assert sum(len(stated) for stated in checks.values()) >= 20
    assert {name: found for name, found in wrong.items() if found} == {}
