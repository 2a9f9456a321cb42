"""A black-box conformance kit for idempotent HTTP APIs.

It checks, from outside and over HTTP alone, what the IETF draft "The
Idempotency-Key HTTP Header Field" and the order service's specification
(docs/SPECIFICATION.md §3) ask of an API whose commands take an
``Idempotency-Key``: keys refused when malformed, answers replayed byte for
byte, conflicts for a reused key, one execution however many copies arrive
at once, keys scoped by principal, and the policy published as data.

::

    from idempotency_conformance import Options, run_checks, render_text

    report = run_checks(Options(base_url="http://127.0.0.1:8000", token=token))
    print(render_text(report))
    assert report.passed

The command line (``idempotency-conformance``) is :mod:`idempotency_conformance.cli`.
"""

from idempotency_conformance._version import __version__
from idempotency_conformance.body import ConfigError
from idempotency_conformance.checks import CHECKS, Check
from idempotency_conformance.report import Report, Result, Status, render_json, render_text
from idempotency_conformance.runner import run_checks
from idempotency_conformance.target import Command, Exchange, Options

__all__ = [
    "CHECKS",
    "Check",
    "Command",
    "ConfigError",
    "Exchange",
    "Options",
    "Report",
    "Result",
    "Status",
    "__version__",
    "render_json",
    "render_text",
    "run_checks",
]
