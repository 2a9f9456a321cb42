"""``idempotency-conformance``: the checks against an API, from the command line.

Exit status: 0 when no check failed (skipped checks fail nothing), 1 when
one did, 2 when the options cannot be used.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from idempotency_conformance._version import __version__
from idempotency_conformance.body import ConfigError
from idempotency_conformance.checks import CHECKS
from idempotency_conformance.report import render_json, render_text
from idempotency_conformance.runner import run_checks
from idempotency_conformance.target import DEFAULT_BODY, DEFAULT_INVALID_BODY, Command, Options

EXIT_PASSED, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def parser() -> argparse.ArgumentParser:
    """The command line's options; the defaults fit the order service."""
    p = argparse.ArgumentParser(
        prog="idempotency-conformance",
        description="Check an idempotent HTTP API from outside (conformance/README.md).",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--base-url", required=True, help="the API's root, e.g. http://127.0.0.1:8000")
    p.add_argument("--token", required=True, help="a bearer token of one principal")
    p.add_argument("--other-token", help="another principal's token (else other-principal skips)")
    p.add_argument("--command", default="POST /v1/orders", help="the command checked")
    p.add_argument(
        "--body", default=DEFAULT_BODY, help="its JSON body, or @FILE; {n} is a fresh value"
    )
    p.add_argument(
        "--invalid-body",
        default=DEFAULT_INVALID_BODY,
        help="a JSON body (or @FILE) the command refuses with a final 4xx",
    )
    p.add_argument("--vary", default="/customerId", help="JSON Pointer of a member to change")
    p.add_argument(
        "--other-command",
        help="another command for the same key (default: from the policy, else POST /v1/payments)",
    )
    p.add_argument(
        "--path-command",
        default="PUT /v1/orders/ord_ck{n}",
        help="a command with a path parameter, {n} in its path ('' skips conflict-path)",
    )
    p.add_argument("--replay-header", default="Idempotent-Replayed", help="the replay marker")
    p.add_argument("--concurrency", type=int, default=16, help="copies sent at once")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    p.add_argument(
        "--only", action="append", choices=[c.id for c in CHECKS], help="run this check (repeat)"
    )
    p.add_argument("--json", action="store_true", help="write the JSON report to stdout")
    return p


def options_from(args: argparse.Namespace) -> Options:
    """The library's options from the parsed command line.

    :raises ConfigError: a command or a body that cannot be used.
    """
    return Options(
        base_url=args.base_url,
        token=args.token,
        other_token=args.other_token,
        command=Command.parse(args.command),
        body=_text(args.body),
        invalid_body=_text(args.invalid_body),
        vary=args.vary,
        other_command=Command.parse(args.other_command) if args.other_command else None,
        path_command=Command.parse(args.path_command) if args.path_command else None,
        replay_header=args.replay_header,
        concurrency=args.concurrency,
        timeout=args.timeout,
    )


def _text(value: str) -> str:
    """``value``, or the content of the file it names as ``@FILE``."""
    if not value.startswith("@"):
        return value
    try:
        return Path(value[1:]).read_text()
    except OSError as error:
        raise ConfigError(f"cannot read {value[1:]}: {error.strerror}") from error


def main(argv: Sequence[str] | None = None) -> int:
    """Run the checks as the command line says; the exit status."""
    args = parser().parse_args(argv)
    try:
        report = run_checks(options_from(args), only=args.only)
    except ConfigError as error:
        print(f"idempotency-conformance: {error}", file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(render_json(report) if args.json else render_text(report))
    return EXIT_PASSED if report.passed else EXIT_FAILED
