"""Run the checks against an API: :func:`run_checks`, the library's one entry point."""

import time
from collections.abc import Collection

import httpx

from idempotency_conformance.checks import CHECKS, Check, Failed, Skipped, published_policy
from idempotency_conformance.report import Report, Result, Status
from idempotency_conformance.target import Exchange, Options, Target


def run_checks(options: Options, *, only: Collection[str] | None = None) -> Report:
    """Run every check (or those ``only`` names, in their order) against ``options.base_url``.

    :raises ConfigError: the options cannot be used (a body that is not JSON,
        a --vary pointer that names nothing).
    :raises ValueError: ``only`` names a check that does not exist.
    """
    options.validate()
    unknown = set(only or ()) - {check.id for check in CHECKS}
    if unknown:
        raise ValueError(f"no such check: {', '.join(sorted(unknown))}")
    started = time.monotonic()
    target = Target(options)
    try:
        results = [run_one(check, target) for check in CHECKS if only is None or check.id in only]
        notes = [_policy_note(target)]
    finally:
        target.close()
    return Report(
        base_url=options.base_url,
        command=str(options.command),
        results=results,
        seconds=time.monotonic() - started,
        notes=notes,
    )


def run_one(check: Check, target: Target) -> Result:
    """One check's result; an error of the kit's own is a FAIL that says so."""
    started = time.monotonic()
    status, reason = Status.PASS, ""
    exchanges: tuple[Exchange, ...] = ()
    try:
        reason = check.run(target) or ""
    except Failed as failure:
        status, reason, exchanges = Status.FAIL, failure.reason, failure.exchanges
    except Skipped as skip:
        status, reason = Status.SKIP, str(skip)
    except httpx.HTTPError as error:
        status, reason = Status.FAIL, f"no answer: {error!r}"
    return Result(
        id=check.id,
        rule=check.rule,
        title=check.title,
        status=status,
        reason=reason,
        exchanges=exchanges,
        seconds=time.monotonic() - started,
    )


def _policy_note(target: Target) -> str:
    if published_policy(target) is None:
        return "no idempotency policy published at /v1/idempotency-policy"
    return "idempotency policy read from /v1/idempotency-policy"
