"""The checks, one function each, and their list, :data:`CHECKS` (runner.py runs them).

Each check sends its own requests under keys of its own (the check's id and
a UUID 4), so that no check depends on another's leftovers, and ends in one
of three ways: it returns (PASS, with an optional note), raises
:class:`Failed` with the exchanges that show the failure (FAIL), or raises
:class:`Skipped` with the reason it could not run here (SKIP).

Rules are cited as "draft §x" (draft-ietf-httpapi-idempotency-key-header,
sections as the working group's source of it numbers them) and "spec §3
rule n" (the order service's docs/SPECIFICATION.md).
"""

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx

from idempotency_conformance.body import JSON, encode, respelled, varied
from idempotency_conformance.target import (
    KEY_HEADER,
    Command,
    Exchange,
    KeyValue,
    Target,
)

# The service's own limit (spec §3 rule 1), used when no policy publishes one.
DEFAULT_KEY_MAX_LENGTH = 255
# This service's payments: another command to send a used key to, when
# neither --other-command nor a published policy names one.
FALLBACK_OTHER_COMMAND = Command("POST", "/v1/payments")
POLICY_PATH = "/v1/idempotency-policy"
LOOKUP_PATH = "/v1/idempotency-keys/"
# The longest a policy may be cached (spec §3 rule 15): a client must see a
# changed retention within the hour.
POLICY_MAX_AGE = 3600
# Seconds within which a key's expiry must agree with the published
# retention: the look-up and the claim are read a request apart.
RETENTION_SLACK = 5
# The longest one Retry-After is honoured, and the wait when a 409 gives none.
RETRY_AFTER_CAP = 5.0
RETRY_AFTER_DEFAULT = 1.0
CONFLICT_STATUSES = (409, 422)


class Failed(Exception):
    """The API broke the rule; ``exchanges`` show how."""

    def __init__(self, reason: str, exchanges: Iterable[Exchange] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.exchanges = tuple(exchanges)


class Skipped(Exception):
    """The check cannot run against this API, for the reason given."""


def expect(condition: bool, reason: str, *exchanges: Exchange) -> None:
    """Fail with ``reason`` and ``exchanges`` unless ``condition`` holds."""
    if not condition:
        raise Failed(reason, exchanges)


@dataclass(frozen=True)
class Sent:
    """A command the API executed: its key, path, body and answer."""

    key: str
    path: str
    body: JSON
    answer: Exchange


# --- Shared steps ---------------------------------------------------------------------


def execute(target: Target, check_id: str, *, command: Command | None = None) -> Sent:
    """Send the valid body under a new key; fails unless the API answers 2xx."""
    command = command or target.options.command
    key, path, body = target.key(check_id), target.path(command), target.body()
    answer = target.send_json(command, path, body, key=key)
    expect(
        answer.succeeded,
        f"the valid request got {answer.status}, not a 2xx: the check needs one "
        "(check --body, --command and --token)",
        answer,
    )
    return Sent(key, path, body, answer)


def resource(answer: Exchange) -> str | bytes:
    """What an answer names: its Location, or else its body's bytes."""
    return answer.location if answer.location is not None else answer.body


def expect_replay(first: Exchange, again: Exchange, *, what: str, exact: bool = True) -> None:
    """``again`` replays ``first``: its status, Location and marker, and its bytes if ``exact``.

    Not exact, the same resource is enough (the same Location, or the same
    body where there is none).
    """
    expect(not first.replayed, "the first answer is marked replayed", first)
    expect(
        again.status == first.status,
        f"{what} got {again.status}, the first request {first.status}",
        first,
        again,
    )
    if exact:
        expect(again.body == first.body, f"{what} is not the first answer's bytes", first, again)
        expect(
            again.headers.get("Content-Type") == first.headers.get("Content-Type"),
            f"{what} has another Content-Type",
            first,
            again,
        )
    expect(again.location == first.location, f"{what} has another Location", first, again)
    expect(resource(again) == resource(first), f"{what} names another resource", first, again)
    expect(again.replayed, f"{what} is not marked replayed", first, again)


def expect_conflict(answer: Exchange, *, first: Exchange, what: str) -> None:
    """``answer`` refuses a used key: 409 or 422, not marked replayed, nothing created."""
    expect(
        answer.status in CONFLICT_STATUSES,
        f"{what} under a used key got {answer.status}, not a conflict (409 or 422)",
        first,
        answer,
    )
    expect(not answer.replayed, f"{what} got a replay, not a conflict", first, answer)
    expect(answer.location is None, f"the conflict has a Location: {what} made something", answer)


def expect_not_its_usual_answer(answer: Exchange, control: Exchange, *, what: str) -> None:
    """A conflict is not what the same request gets under a new key (its own refusal)."""
    expect(
        control.status != answer.status,
        f"{what} gets {control.status} under a new key too: the {answer.status} "
        "refuses the request, not the reused key",
        answer,
        control,
    )


def published_policy(target: Target) -> dict[str, Any] | None:
    """The API's idempotency policy (spec §3 rule 15), read once; None when none is published."""
    if not target.policy_read:
        answer = target.send("GET", POLICY_PATH, key=None, token=None)
        policy = answer.json() if answer.status == 200 else None
        target.policy = policy if isinstance(policy, dict) else None
        target.policy_read = True
    return target.policy


def key_max_length(target: Target) -> int:
    """The longest key the API takes: the policy's keyMaxLength, else 255."""
    limit = (published_policy(target) or {}).get("keyMaxLength")
    valid = isinstance(limit, int) and not isinstance(limit, bool) and limit > 0
    return limit if valid else DEFAULT_KEY_MAX_LENGTH  # type: ignore[return-value]


def other_command(target: Target) -> Command:
    """Another command than --command: --other-command, else one the policy lists, else payments."""
    if target.options.other_command is not None:
        return target.options.other_command
    command = target.options.command
    for route in (published_policy(target) or {}).get("commands") or ():
        if not isinstance(route, dict):
            continue
        method, path = route.get("method"), route.get("path")
        if not (isinstance(method, str) and isinstance(path, str)) or "{" in path:
            continue
        if not command.matches(method, path):
            return Command(method.upper(), path)
    return FALLBACK_OTHER_COMMAND


# --- 1. missing-key -------------------------------------------------------------------


def check_missing_key(target: Target) -> str | None:
    """A command without the header is refused with 400 and makes nothing."""
    command = target.options.command
    answer = target.send_json(command, target.path(command), target.body(), key=None)
    expect(
        answer.status == 400,
        f"a command without {KEY_HEADER} got {answer.status}, not 400",
        answer,
    )
    expect(answer.location is None, "the refusal has a Location: something was made", answer)
    return None


# --- 2. invalid-key -------------------------------------------------------------------


def invalid_keys(target: Target) -> list[tuple[str, KeyValue]]:
    """Keys the header's syntax excludes, each with what is wrong with it."""
    base = target.key("invalid-key")
    limit = key_max_length(target)
    head, tail = base[:11], base[11:]
    return [
        ("empty", ""),
        (f"{limit + 1} characters", (base * (limit // len(base) + 2))[: limit + 1]),
        ("a space inside", f"{head} {tail}"),
        ("a control character (tab) inside", f"{head}\t{tail}"),
        ("a non-ASCII byte", head.encode() + b"\xc3\xa9" + tail.encode()),
        ("a list of two keys", f"{base}-a, {base}-b"),
        ("the header sent twice", [base, base]),
    ]


def check_invalid_key(target: Target) -> str | None:
    """Each malformed key is refused with 400, before the command runs."""
    command = target.options.command
    wrong: list[str] = []
    shown: list[Exchange] = []
    for name, key in invalid_keys(target):
        answer = target.send_json(command, target.path(command), target.body(), key=key)
        if answer.status != 400 or answer.location is not None:
            wrong.append(f"{name}: {answer.status}")
            shown.append(answer)
    expect(not wrong, "malformed keys not refused with 400: " + "; ".join(wrong), *shown)
    return None


# --- 3. replay-success and 4. replay-failure ------------------------------------------


def check_replay_success(target: Target) -> str | None:
    """The same key and body again: the first answer, byte for byte, marked replayed."""
    sent = execute(target, "replay-success")
    again = target.send_json(target.options.command, sent.path, sent.body, key=sent.key)
    expect_replay(sent.answer, again, what="the repeat")
    return None


def check_replay_failure(target: Target) -> str | None:
    """A final 4xx (the invalid body) is stored too: its repeat is a marked replay."""
    command = target.options.command
    key, path, body = target.key("replay-failure"), target.path(command), target.invalid_body()
    first = target.send_json(command, path, body, key=key)
    expect(
        first.status is not None and 400 <= first.status < 500 and first.status != 409,
        f"the invalid body got {first.status}, not a final 4xx (check --invalid-body)",
        first,
    )
    again = target.send_json(command, path, body, key=key)
    expect_replay(first, again, what="the repeat of the refused request")
    return f"{first.status} stored and replayed"


# --- 5. respelled-request -------------------------------------------------------------


def check_respelled_request(target: Target) -> str | None:
    """Member order, white space and ``2`` as ``2.0``: the same request, replayed."""
    sent = execute(target, "respelled-request")
    spelled = respelled(sent.body)
    again = target.send(target.options.command.method, sent.path, key=sent.key, body=spelled)
    expect(
        again.status not in CONFLICT_STATUSES or again.status == sent.answer.status,
        f"the same JSON spelled otherwise got {again.status}: a conflict, so the "
        "fingerprint is over the bytes, not the canonical JSON",
        sent.answer,
        again,
    )
    expect_replay(sent.answer, again, what="the respelled request", exact=False)
    return None


# --- 6. conflict-body -----------------------------------------------------------------


def check_conflict_body(target: Target) -> str | None:
    """Another body under a used key is a conflict; the original still replays afterwards."""
    command, pointer = target.options.command, target.options.vary
    sent = execute(target, "conflict-body")
    changed = varied(sent.body, pointer)
    answer = target.send_json(command, sent.path, changed, key=sent.key)
    expect_conflict(answer, first=sent.answer, what=f"a body with {pointer} changed")
    expect_mismatch_names(answer, pointer)
    control = target.send_json(command, target.path(command), changed, key=target.key("control"))
    expect_not_its_usual_answer(answer, control, what="the changed body")
    again = target.send_json(command, sent.path, sent.body, key=sent.key)
    expect_replay(sent.answer, again, what="the original after the conflict", exact=False)
    return conflict_note(answer)


def expect_mismatch_names(answer: Exchange, pointer: str) -> None:
    """Where the problem lists ``details.mismatch`` (spec §3 rule 6), it names ``pointer``."""
    problem = answer.json()
    details = problem.get("details") if isinstance(problem, dict) else None
    mismatch = details.get("mismatch") if isinstance(details, dict) else None
    if mismatch is None:
        return
    expect(
        isinstance(mismatch, list) and pointer in mismatch,
        f"details.mismatch does not name {pointer}: {mismatch!r}",
        answer,
    )


def conflict_note(answer: Exchange) -> str:
    if answer.status == 409:
        return "409, as spec §3 rule 6 says (the draft says 422)"
    return "422, as the draft says (spec §3 rule 6 says 409)"


# --- 7. conflict-endpoint -------------------------------------------------------------


def check_conflict_endpoint(target: Target) -> str | None:
    """A used key sent to another endpoint is a conflict, and that endpoint executes nothing."""
    other = other_command(target)
    sent = execute(target, "conflict-endpoint")
    answer = target.send_json(other, target.path(other), sent.body, key=sent.key)
    if answer.status in (404, 405) and not answer.replayed:
        raise Skipped(f"{other} answers {answer.status} here: name one with --other-command")
    expect_conflict(answer, first=sent.answer, what=f"{other}")
    control = target.send_json(other, target.path(other), sent.body, key=target.key("control"))
    expect_not_its_usual_answer(answer, control, what=f"{other} with this body")
    return f"{other}: {conflict_note(answer)}"


# --- 8. conflict-path -----------------------------------------------------------------


def check_conflict_path(target: Target) -> str | None:
    """A used key sent with another path parameter is a conflict, and creates nothing there."""
    command = target.options.path_command
    if command is None or "{n}" not in command.path:
        raise Skipped("no --path-command with {n} in its path")
    key, body = target.key("conflict-path"), target.body()
    first_path, second_path = target.path(command), target.path(command)
    first = target.send_json(command, first_path, body, key=key)
    if first.status in (404, 405):
        raise Skipped(f"{command} answers {first.status} here: name one with --path-command")
    expect(first.succeeded, f"{command} got {first.status}, not a 2xx", first)
    answer = target.send_json(command, second_path, body, key=key)
    expect_conflict(answer, first=first, what="another path parameter")
    read = target.send("GET", second_path, key=None)
    expect(
        not read.succeeded,
        f"GET {second_path} answers {read.status}: the conflicting request made it",
        answer,
        read,
    )
    control = target.send_json(command, target.path(command), body, key=target.key("control"))
    expect_not_its_usual_answer(answer, control, what="this body at a new path")
    return conflict_note(answer)


# --- 9. concurrent-copies -------------------------------------------------------------


def check_concurrent_copies(target: Target) -> str | None:
    """Copies of one new command at once: one execution, every copy its answer, no 5xx."""
    command, copies = target.options.command, target.options.concurrency
    key, path, body = target.key("concurrent-copies"), target.path(command), encode(target.body())
    histories = send_at_once(
        target, copies, lambda client: until_final(target, client, command, path, body, key)
    )
    every = [exchange for history in histories for exchange in history]
    finals = [history[-1] for history in histories]
    crashed = [e for e in every if e.status is None or e.status >= 500]
    expect(not crashed, f"{len(crashed)} copies got a 5xx or no answer", *crashed[:3])
    pending = [e for e in finals if e.status == 409]
    expect(
        not pending,
        f"{len(pending)} copies still 409 after {target.options.deadline:.0f}s",
        *pending[:3],
    )
    executed = [e for e in finals if not e.replayed]
    expect(
        len(executed) == 1,
        f"{len(executed)} of {copies} copies executed (not marked replayed), not 1",
        *executed[:3],
    )
    (first,) = executed
    others = [e for e in finals if e.status != first.status or resource(e) != resource(first)]
    expect(
        not others,
        f"{len(others)} copies name another answer than the executed one's",
        first,
        *others[:2],
    )
    retried = sum(len(history) > 1 for history in histories)
    return f"{copies} copies: 1 executed, {copies - 1} replayed, {retried} retried after 409"


def send_at_once(
    target: Target, copies: int, send: Callable[[httpx.Client], list[Exchange]]
) -> list[list[Exchange]]:
    """Run ``send`` in ``copies`` threads, each with a client (a connection) of its own,
    released together by a barrier."""
    barrier = threading.Barrier(copies)
    histories: list[list[Exchange]] = [[] for _ in range(copies)]
    errors: list[BaseException] = []

    def copy(index: int) -> None:
        try:
            with target.new_client() as client:
                barrier.wait(timeout=target.options.timeout)
                histories[index] = send(client)
        except BaseException as error:  # reported by the caller's thread
            errors.append(error)

    threads = [threading.Thread(target=copy, args=(i,), daemon=True) for i in range(copies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=target.options.deadline + target.options.timeout)
    if errors:
        raise errors[0]
    return histories


def until_final(
    target: Target, client: httpx.Client, command: Command, path: str, body: bytes, key: str
) -> list[Exchange]:
    """Send, and again after each 409 (in progress) as Retry-After says, until a final answer."""
    deadline = time.monotonic() + target.options.deadline
    history = [target.send(command.method, path, key=key, body=body, client=client)]
    while history[-1].status == 409 and time.monotonic() < deadline:
        time.sleep(retry_after(history[-1]))
        history.append(target.send(command.method, path, key=key, body=body, client=client))
    return history


def retry_after(answer: Exchange) -> float:
    """The seconds Retry-After asks for (seconds or an HTTP date), within [0, 5]."""
    value = answer.headers.get("Retry-After")
    if value is None:
        return RETRY_AFTER_DEFAULT
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return RETRY_AFTER_DEFAULT
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


# --- 10. refusals-not-stored ----------------------------------------------------------


def check_refusals_not_stored(target: Target) -> str | None:
    """A request refused before the command (JSON, media type, token) leaves its key unused."""
    command = target.options.command
    for name, how in refusals(target):
        key, path, body = target.key("refusals-not-stored"), target.path(command), target.body()
        refused = target.send(command.method, path, key=key, **how(body))
        expect(
            refused.status is not None and 400 <= refused.status < 500 and refused.status != 409,
            f"{name} got {refused.status}, not a 4xx refusal",
            refused,
        )
        valid = target.send_json(command, path, body, key=key)
        expect(
            valid.succeeded and not valid.replayed,
            f"after {name} ({refused.status}) under the same key, the valid request got "
            f"{valid.status}{' marked replayed' if valid.replayed else ''}, not a new execution",
            refused,
            valid,
        )
    return None


def refusals(target: Target) -> list[tuple[str, Callable[[JSON], dict[str, Any]]]]:
    """The refusals before the command, each as how it changes the valid request."""
    return [
        ("malformed JSON", lambda body: {"body": encode(body)[:-1]}),
        ("a text/plain body", lambda body: {"body": encode(body), "content_type": "text/plain"}),
        ("no token", lambda body: {"body": encode(body), "token": None}),
    ]


# --- 11. other-principal --------------------------------------------------------------


def check_other_principal(target: Target) -> str | None:
    """Another principal's use of a key is unrelated: executed anew, never a replay or conflict."""
    other = target.options.other_token
    if other is None:
        raise Skipped("no --other-token (a second principal's token)")
    command = target.options.command
    sent = execute(target, "other-principal")
    theirs = target.send_json(command, sent.path, sent.body, key=sent.key, token=other)
    expect(
        theirs.succeeded and not theirs.replayed,
        f"the same key and body from another principal got {theirs.status}"
        f"{' marked replayed' if theirs.replayed else ''}, not a new execution",
        sent.answer,
        theirs,
    )
    expect(
        "{n}" in command.path or resource(theirs) != resource(sent.answer),
        "the other principal's answer names the first principal's resource",
        sent.answer,
        theirs,
    )
    second = execute(target, "other-principal")
    changed = varied(second.body, target.options.vary)
    answer = target.send_json(command, second.path, changed, key=second.key, token=other)
    expect(
        answer.succeeded and not answer.replayed,
        f"another body under the key from another principal got {answer.status}, "
        "not a new execution",
        second.answer,
        answer,
    )
    return None


# --- 12. policy -----------------------------------------------------------------------


def check_policy(target: Target) -> str | None:
    """GET /v1/idempotency-policy, without a token: the numbers and routes a client needs."""
    answer = target.send("GET", POLICY_PATH, key=None, token=None)
    if answer.status == 404:
        raise Skipped(f"GET {POLICY_PATH} answers 404: no policy published")
    expect(answer.status == 200, f"GET {POLICY_PATH} without a token got {answer.status}", answer)
    policy = answer.json()
    expect(isinstance(policy, dict), "the policy is not a JSON object", answer)
    problems = [*policy_problems(policy), *route_problems(target, policy), *cache_problems(answer)]
    expect(not problems, "; ".join(problems), answer)
    return None


def policy_problems(policy: dict[str, Any]) -> list[str]:
    """What the policy's members lack, as sentences."""
    problems = []
    if policy.get("header") != KEY_HEADER:
        problems.append(f"header is {policy.get('header')!r}, not {KEY_HEADER!r}")
    if not _is_int(policy.get("keyMaxLength")):
        problems.append("keyMaxLength is not an integer")
    for name in (
        "retentionSeconds",
        "waitSeconds",
        "lockTimeoutSeconds",
        "storagePerPrincipalBytes",
    ):
        if not _is_number(policy.get(name)):
            problems.append(f"{name} is not a number")
    fingerprint = policy.get("fingerprint")
    if not (
        isinstance(fingerprint, dict)
        and isinstance(fingerprint.get("canonicalization"), str)
        and isinstance(fingerprint.get("hash"), str)
        and isinstance(fingerprint.get("covers"), list)
    ):
        problems.append("fingerprint is not {canonicalization, hash, covers}")
    return problems


def route_problems(target: Target, policy: dict[str, Any]) -> list[str]:
    """The checked commands the policy's ``commands`` leave out."""
    routes = policy.get("commands")
    if not isinstance(routes, list) or not all(
        isinstance(r, dict) and isinstance(r.get("method"), str) and isinstance(r.get("path"), str)
        for r in routes
    ):
        return ["commands is not a list of {method, path}"]
    checked = [target.options.command, target.options.path_command, target.options.other_command]
    return [
        f"commands does not list {command}"
        for command in checked
        if command is not None
        and not any(command.matches(route["method"], route["path"]) for route in routes)
    ]


def cache_problems(answer: Exchange) -> list[str]:
    """Whether Cache-Control bounds the policy's age to an hour."""
    header = answer.headers.get("Cache-Control", "")
    ages = [
        part.strip().split("=", 1)[1].strip('"')
        for part in header.split(",")
        if part.strip().lower().startswith("max-age=")
    ]
    if not ages or not ages[0].isdigit():
        return [f"Cache-Control has no max-age: {header!r}"]
    if int(ages[0]) > POLICY_MAX_AGE:
        return [f"Cache-Control max-age is {ages[0]}, over {POLICY_MAX_AGE}"]
    return []


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# --- 13. retention --------------------------------------------------------------------


def check_retention(target: Target) -> str | None:
    """The published retention, and a used key's expiry where the API can look keys up."""
    retention = _number((published_policy(target) or {}).get("retentionSeconds"))
    if retention is None or retention <= 0:
        raise Skipped("no retentionSeconds published")
    sent = execute(target, "retention")
    lookup = target.send("GET", LOOKUP_PATH + quote(sent.key, safe=""), key=None)
    if lookup.status in (404, 405):
        # For a key just used, a 404 means no look-up route: an API that
        # has one and lost the key fails the replay checks as well.
        return f"retention {retention:g}s published; no key look-up to compare"
    expect(lookup.status == 200, f"the look-up of a used key got {lookup.status}", lookup)
    record = lookup.json()
    kept = _kept_seconds(record)
    if kept is None:
        raise Failed("the look-up has no createdAt and expiresAt", [lookup])
    expect(
        abs(kept - retention) <= RETENTION_SLACK,
        f"the key is kept {kept:.0f}s, the policy says {retention:g}s",
        lookup,
    )
    return f"retention {retention:g}s, the key's expiry agrees"


def _kept_seconds(record: JSON) -> float | None:
    """``expiresAt`` less ``createdAt`` of a key's look-up, in seconds; None without them."""
    if not isinstance(record, dict):
        return None
    try:
        created = datetime.fromisoformat(str(record["createdAt"]))
        expires = datetime.fromisoformat(str(record["expiresAt"]))
    except (KeyError, ValueError):
        return None
    return (expires - created).total_seconds()


# --- The list -----------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """A check: its stable id, the rules it comes from, and the function that runs it."""

    id: str
    rule: str
    title: str
    run: Callable[[Target], str | None]


CHECKS: tuple[Check, ...] = (
    Check("missing-key", "draft §2.7, spec §3 rule 1", "A missing key is 400", check_missing_key),
    Check("invalid-key", "draft §2.1, spec §3 rule 1", "A malformed key is 400", check_invalid_key),
    Check(
        "replay-success",
        "draft §2.6, spec §3 rule 5",
        "A success is replayed",
        check_replay_success,
    ),
    Check(
        "replay-failure",
        "draft §2.6, spec §3 rule 5",
        "A final 4xx is replayed",
        check_replay_failure,
    ),
    Check(
        "respelled-request",
        "draft §2.4, spec §3 rule 3",
        "Canonical JSON fingerprint",
        check_respelled_request,
    ),
    Check(
        "conflict-body",
        "draft §2.2 §2.7, spec §3 rule 6",
        "Another body conflicts",
        check_conflict_body,
    ),
    Check(
        "conflict-endpoint",
        "draft §2.2, spec §3 rules 3, 6",
        "Another endpoint conflicts",
        check_conflict_endpoint,
    ),
    Check(
        "conflict-path",
        "draft §2.2, spec §3 rules 3, 6",
        "Another path parameter conflicts",
        check_conflict_path,
    ),
    Check(
        "concurrent-copies",
        "draft §2.6, spec §3 rules 4, 7, 8",
        "Concurrent copies execute once",
        check_concurrent_copies,
    ),
    Check(
        "refusals-not-stored",
        "spec §3 rules 1, 13",
        "Refusals store no key",
        check_refusals_not_stored,
    ),
    Check(
        "other-principal",
        "draft §5, spec §3 rule 2",
        "Keys are per principal",
        check_other_principal,
    ),
    Check("policy", "draft §2.5, spec §3 rule 15", "The policy is published", check_policy),
    Check(
        "retention",
        "draft §2.3, spec §3 rules 10, 11, 15",
        "Retention as published",
        check_retention,
    ),
)
