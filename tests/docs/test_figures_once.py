"""A measured figure lives in one place: docs/SCALING.md, with the run it comes from.

Every release measures again, and a figure copied into another document
(or into a comment of the code) stays at the value it had the day it was
copied: the copies drift. So a document other than SCALING.md, and the
service's code, may link to SCALING.md but not state a figure it
measures, and SCALING.md itself states each of its run's figures as its
run printed them: the tables' column of run 2 against run 2's output,
quoted whole, and the summaries and the arithmetic against the tables.
"""

import re
from pathlib import Path

import pytest

from tests.docs.sources import SERVICE_PACKAGES

ROOT = Path(__file__).resolve().parents[2]
SCALING = (ROOT / "docs" / "SCALING.md").read_text()

# "202 req/s", "1,094 B", "6.46 ms", "98 MiB": a figure with its unit.
_FIGURE = re.compile(
    r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?) ?(req/s|tx/s|ms|µs|B|bytes|kB|KB|KiB|MB|MiB|GB|TB)(?!\w)"
)
_SPELLED = {"KB": "kB", "bytes": "B"}
# Units only a benchmark gives: a rate of requests or transactions, and the
# microseconds of a timed step.
_BENCHMARK_UNIT = re.compile(r"(?<![\w.,])\d[\d,.]* ?(?:req/s|tx/s|µs)(?!\w)")
# Figures that SCALING.md states too but that are no measurement of it: the
# values it ran with, which the other documents state as what they are.
NOT_MEASURED = {
    r"\b50 ms\b": "the simulated provider's latency and the purge's pause between "
    "batches, two settings' defaults (PAYMENT_PROVIDER_LATENCY, IDEMPOTENCY_PURGE_PAUSE)",
    r"\b1 MiB\b": "the request body limit (MAX_REQUEST_BODY_BYTES)",
    r"\b1 MB\b": "a size chosen, not measured: the hostile bodies `make bench` sends, "
    "Patroni's maximum_lag_on_failover",
}


def documents() -> list[Path]:
    docs = ROOT / "docs"
    return [
        ROOT / "README.md",
        ROOT / "client" / "README.md",
        *sorted(path for path in docs.glob("*.md") if path.name != "SCALING.md"),
        *sorted((docs / "decisions").glob("*.md")),
        *sorted(
            path
            for package in SERVICE_PACKAGES
            for path in (ROOT / package).rglob("*.py")
            if "migrations" not in path.parts
        ),
    ]


def figures(text: str) -> set[str]:
    """The figures ``text`` states, spelled alike: ``1094 B`` for "1,094 bytes"."""
    for allowed in NOT_MEASURED:
        text = re.sub(allowed, "", text)
    return {
        f"{number.replace(',', '')} {_SPELLED.get(unit, unit)}"
        for number, unit in _FIGURE.findall(text)
    }


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_other_document_restates_a_figure_scaling_measures(path: Path) -> None:
    text = path.read_text()
    restated = figures(text) & figures(SCALING)
    benchmark = _BENCHMARK_UNIT.findall(text)

    assert restated == set(), (
        f"{path.relative_to(ROOT)} restates what docs/SCALING.md measures: link to its section"
    )
    assert benchmark == [], f"{path.relative_to(ROOT)} states a benchmark's figure"


# --- SCALING.md against itself -------------------------------------------------

RUN_2 = SCALING.split("Run 2, as `make bench` prints it:", 1)[1].split("```text\n", 1)[1]
RUN_2 = RUN_2.split("```", 1)[0]


def number(text: str) -> float:
    return float(text.replace(",", ""))


def table(heading_row: str) -> list[list[str]]:
    """The rows of the table whose header row starts ``heading_row``, as cells."""
    block = SCALING.split(f"\n| {heading_row}", 1)[1].split("\n\n", 1)[0]
    return [
        [cell.strip() for cell in line.strip("|").split(" | ")] for line in block.splitlines()[2:]
    ]


def printed(label: str, pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern`` on run 2's output line that starts with ``label``."""
    match = re.search(rf"^ *{re.escape(label)} +{pattern}", RUN_2, re.MULTILINE)
    assert match is not None, f"run 2's output has no line {label!r} {pattern!r}"
    return match.groups()


def median_range(cell: str) -> tuple[float, ...]:
    """``202 (157-229)`` or ``1,163 (799-1,391)``, either dash: the median and the range."""
    return tuple(number(value) for value in re.findall(r"[\d,]+(?:\.\d+)?", cell))


def test_the_load_table_quotes_run_2_as_it_printed() -> None:
    rows = table("Load, req/s")
    lines = re.findall(
        r"^  (first execution|bare|replay|read) +(?:POST|GET) +\S+ +(\d+) req/s \((\d+)-(\d+)\)"
        r" +p50 +([\d.]+) ms +p99 +([\d.]+) ms$",
        RUN_2,
        re.MULTILINE,
    )

    assert len(rows) == len(lines) == 5
    for row, (_, rate, low, high, p50, p99) in zip(rows, lines, strict=True):
        assert median_range(row[2]) == (number(rate), number(low), number(high)), row[0]
        assert row[4] == f"{round(float(p50))} ms, {round(float(p99))} ms", row[0]


# A ratio table's row, to the line of run 2's output that prints it.
_RATIO_LINES = {
    "create / ceiling": "create / ceiling",
    "payment / ceiling": "payment / ceiling",
    "idempotent / bare first executions": "idempotent / bare first executions",
    "replays / first executions": "replays / first executions",
    "reads / first executions": "reads / first executions",
    "replays / reads": "replays / reads",
    "CPU per first execution, bare / idempotent": "CPU of a first execution, bare / idempotent",
    "the same in one process": "CPU, bare / idempotent",
    "its Python alone": "Python alone, bare / idempotent",
    "first executions' share under a retry storm": "share the first executions keep",
}


def ratios() -> dict[str, list[str]]:
    """The ratio table's rows, by the start of their name that _RATIO_LINES knows."""
    rows = {}
    for name, *runs in table("Ratio (median of the rounds' ratios)"):
        (known,) = [start for start in _RATIO_LINES if name.startswith(start)]
        rows[known] = runs
    assert set(rows) == set(_RATIO_LINES)
    return rows


def medians(name: str) -> list[float]:
    return [median_range(cell)[0] for cell in ratios()[name]]


def test_the_ratio_table_quotes_run_2_as_it_printed() -> None:
    for name, runs in ratios().items():
        (values,) = printed(_RATIO_LINES[name], r"([\d.]+(?: +\([\d.]+-[\d.]+\))?)")

        assert median_range(runs[1]) == median_range(values), name


def test_where_the_time_goes_quotes_run_2_as_it_printed() -> None:
    rows = table("Load | gunicorn (Python)")
    lines = re.findall(
        r"^  (?:first execution|bare|replay|read) +(?:POST|GET) +\S+ +([\d.]+) ms +([\d.]+) ms"
        r" +([\d.]+) +(\d+) B$",
        RUN_2,
        re.MULTILINE,
    )
    (key_bytes,) = printed("a stored key takes", r"(\d+) bytes")

    assert len(rows) == len(lines) == 5
    for row, line in zip(rows, lines, strict=True):
        assert tuple(median_range(cell)[0] for cell in row[1:]) == tuple(map(float, line)), row[0]
    assert f"A stored key takes {int(key_bytes):,} bytes" in SCALING


def test_the_ceiling_table_quotes_run_2_as_it_printed() -> None:
    rows = {row[0]: row[3] for row in table("| before | run 1 | run 2 | run 3")}

    for script in ("create_order.sql", "start_payment.sql"):
        rate, low, high = printed(script, r"(\d+) tx/s \((\d+)-(\d+)\)")
        assert median_range(rows[f"`{script}`, pgbench, tx/s"]) == (
            number(rate),
            number(low),
            number(high),
        )
    for load, row in (("POST /v1/orders", "a create's"), ("POST /v1/payments", "a payment's")):
        cpu = printed(f"first execution  {load}", r"([\d.]+) ms +([\d.]+) ms")
        assert rows[f"{row} CPU through gunicorn: Python, PostgreSQL"] == "{}, {} ms".format(*cpu)


# The multiplication sign the arithmetic is written with.
TIMES = "\N{MULTIPLICATION SIGN}"


def stated(pattern: str) -> tuple[str, ...]:
    """The groups of ``pattern`` in SCALING.md's prose, read on one line."""
    match = re.search(pattern, " ".join(SCALING.split()))
    assert match is not None, f"docs/SCALING.md no longer says {pattern!r}"
    return match.groups()


def agrees(written: str, value: float) -> bool:
    """Whether ``written`` is ``value`` rounded to as many decimals as it shows."""
    decimals = len(written.split(".")[1]) if "." in written else 0
    return float(written) == round(value, decimals)


def all_agree(written: tuple[str, ...], values: tuple[float, ...]) -> bool:
    return all(agrees(w, v) for w, v in zip(written, values, strict=True))


def test_the_summaries_say_what_the_ratio_table_says() -> None:
    idempotent = medians("idempotent / bare first executions")
    replays = medians("replays / first executions")
    by_reads = medians("replays / reads")
    storm = medians("first executions' share under a retry storm")
    keeps = stated(r"a first execution keeps ([\d.]+) to ([\d.]+) of the throughput")
    cheap = stated(
        r"It runs at ([\d.]+) to ([\d.]+) times the rate of a first execution, and ([\d.]+) to"
        r" ([\d.]+) times that of a `GET`"
    )
    listed = stated(
        r"idempotent / bare ([\d.]+), ([\d.]+), ([\d.]+) .*? Replays / first executions"
        r" ([\d.]+), ([\d.]+), ([\d.]+); replays / reads ([\d.]+), ([\d.]+), ([\d.]+) .*?"
        r" share under a retry storm ([\d.]+), ([\d.]+), ([\d.]+);"
    )
    storm_section = stated(r"and ([\d.]+) to ([\d.]+) after, in the three runs")

    extremes = (min(idempotent), max(idempotent))
    assert all_agree(keeps, extremes), f"the first bullet says {keeps}, the table {extremes}"
    bounds = (min(replays), max(replays), min(by_reads), max(by_reads))
    assert all_agree(cheap, bounds), f"the second bullet says {cheap}, the table {bounds}"
    assert [float(value) for value in listed] == idempotent + replays + by_reads + storm
    assert [float(value) for value in storm_section] == [min(storm), max(storm)]


def test_the_arithmetic_starts_from_the_measured_costs() -> None:
    first = table("Load | gunicorn (Python)")[0]
    python, postgresql, wal = (median_range(cell)[0] for cell in (first[1], first[2], first[4]))
    (key,) = stated(r"A stored key takes ([\d,]+) bytes")
    inputs = stated(
        r"a first execution takes ([\d.]+) ms of Python and ([\d.]+) ms of PostgreSQL and"
        r" writes ([\d.]+) kB of WAL; a stored key takes ([\d.]+) kB with its answer"
    )
    used = stated(
        rf"10,000 {TIMES} ([\d.]+) ms = .*? 10,000 {TIMES} ([\d.]+) ms = .*?"
        rf" 10,000 {TIMES} ([\d.]+) kB = .*? 10\^9 keys {TIMES} ([\d.]+) kB"
    )
    shares = stated(r"Python is (\d+) % of a first execution's CPU, PostgreSQL (\d+) %")

    measured = (python, postgresql, wal / 1000, number(key) / 1000)
    assert all_agree(inputs, measured), f"the arithmetic takes {inputs}, the table has {measured}"
    assert used == inputs
    assert agrees(shares[0], 100 * python / (python + postgresql))
    assert agrees(shares[1], 100 * postgresql / (python + postgresql))
