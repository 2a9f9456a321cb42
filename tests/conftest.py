"""Fixtures shared by the whole suite; the helpers they use are in tests/support/."""

import inspect
import json
import subprocess
import sys
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from types import CodeType
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from pytest_django import Settings

from accounts.services import create_api_client
from operations.models import Operation
from tests.support import servers
from tests.support.concurrency import FinishedOperation, running_worker
from tests.support.http import ORDER, Api

TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        pytest.exit(
            "The suite runs on PostgreSQL: run `make test`, or set DATABASE_URL=postgres://…",
            returncode=2,
        )
    # Each superuser and each login hashes a password, and PBKDF2's million
    # rounds cost most of a second each: a quarter of the quick loop went on
    # the admin's tests. None of them is about the hash, and the processes the
    # tests start keep the real one.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # WhiteNoise reads every file of STATIC_ROOT for each test client, which
    # `make run`'s collectstatic fills: a tenth of a second a test, for no
    # test, since none serves a static file in this process (pages render on
    # plain storage; the docs are served by a gunicorn of their own). The
    # suite's process sees the fresh clone's, which is not there.
    settings.STATIC_ROOT = str(TESTS / "no-static-root")


# --- Markers -----------------------------------------------------------------
#
# A test's markers (pyproject.toml declares them) say what it starts or costs,
# and are found here rather than written on it: a test that reaches serve()
# through a fixture, or through a helper of its module, is `live` without
# anyone remembering to say so. tests/architecture/test_markers.py holds the
# result to what the tests' source starts.
#
# Weighed against plain markers written per module or per folder
# (`pytestmark`): those leave the marker to its author's memory, and a test
# that reaches a server through a shared fixture, unmarked, runs in `make
# check`'s quick loop, where nothing starts the servers it needs. Finding
# them walks each test's code and its fixtures': about 0.1 s of a 2.5 s
# collection of the whole suite (1,497 tests, timed around markers_of).

# Every test of these folders, whatever it calls: a fault scenario, or make
# run's test, starts gunicorn and its workers with subprocess.Popen, which
# names no helper.
FOLDER_MARKERS: dict[str, tuple[str, ...]] = {
    "live": ("live",),
    "faults": ("fault", "live"),
}

# What starts something, by the name it is defined under; a test (or a
# fixture it uses, or any function or class of tests/ they call) that names
# one of these gets its markers.
STARTERS: dict[str, tuple[str, ...]] = {
    "tests.support.servers.start": ("live",),
    "tests.support.live.serve": ("live",),
    "tests.support.live.celery_worker_command": ("live",),
    "tests.support.faults.RedisServer": ("live",),
    "tests.support.faults.RabbitVhost": ("live",),
    "tests.support.faults.RabbitBroker": ("live",),
    "tests.support.faults.PostgresCluster": ("live",),
    "tests.support.patroni.Etcd": ("live",),
    "tests.support.patroni.PatroniNode": ("live",),
    "tests.support.patroni.PatroniCluster": ("live",),
    "tests.support.patroni.primary_proxy": ("proxy",),
    "tests.support.edge.nginx": ("proxy",),
    "tests.support.pooler.pgbouncer": ("proxy",),
    "tests.support.balancer.balance": ("proxy",),
    "playwright.sync_api.sync_playwright": ("browser",),
    "tests.observability.test_alert_rules.promtool": ("promtool",),
    "tests.support.concurrency.running_worker": ("worker",),
}

# Tests that start nothing but take seconds each, by module.
SLOW: dict[str, set[str]] = {
    # A venv each, with pip.
    "tests/architecture/test_make_venv.py": {
        "test_a_venv_is_kept_for_its_python_and_adopted_when_unrecorded",
        "test_a_venv_left_half_made_is_made_again",
    },
    # A Django process for each line of the README.
    "tests/docs/test_readme.py": {"test_the_readmes_manage_py_lines_run_as_printed"},
    # Django processes of their own, to read settings fresh.
    "tests/hostile/test_admin_exposure.py": {
        "test_the_admin_can_be_switched_off",
        "test_x_forwarded_proto_is_believed_only_behind_a_proxy",
    },
    # Django processes of their own, to read settings fresh.
    "tests/operations/test_retention.py": {
        "test_a_retention_shorter_than_the_key_ttl_is_refused_at_start",
    },
    # Each shape timed at two sizes, several runs.
    "tests/hostile/test_pathological_bodies.py": {
        "test_work_grows_linearly_with_the_body_whatever_its_shape",
    },
    # The conformance kit's every check against fourteen broken reference
    # APIs, a whole run each (about 11 s in all).
    "tests/conformance/test_kit_against_reference.py": {
        "test_a_broken_behaviour_fails_exactly_its_checks",
    },
    # A thousand examples, against the reference implementation.
    "tests/idempotency/test_canonical_json.py": {
        "test_bytes_are_those_of_the_reference_implementation",
    },
    # 150 large bodies, each walked twice.
    "tests/idempotency/test_fingerprint_properties.py": {
        "test_one_walk_and_the_budgeted_choice_of_parts_give_the_same_digests",
    },
}


def _qualified_name(obj: object) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"


def _global_names(code: CodeType) -> Iterator[str]:
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, CodeType):
            yield from _global_names(constant)


def _members(cls: type) -> Iterator[object]:
    for member in vars(cls).values():
        if isinstance(member, staticmethod | classmethod):
            yield member.__func__
        elif isinstance(member, property):
            yield from (f for f in (member.fget, member.fset) if f is not None)
        else:
            yield member


def markers_reached(roots: Iterable[object]) -> set[str]:
    """The markers of the starters that ``roots`` name, directly or through tests/'s code."""
    found: set[str] = set()
    seen: set[int] = set()
    pending = list(roots)
    while pending:
        obj = pending.pop()
        # Functions and classes only: other objects' attributes may run code.
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        obj = inspect.unwrap(obj)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        name = _qualified_name(obj)
        if name in STARTERS:
            found.update(STARTERS[name])
        elif not name.startswith("tests."):
            continue
        elif inspect.isclass(obj):
            pending.extend(_members(obj))
        elif inspect.isfunction(obj):
            namespace = obj.__globals__
            pending.extend(namespace[n] for n in _global_names(obj.__code__) if n in namespace)
    return found


def _commits(item: pytest.Item) -> bool:
    # pytest-django empties every table after such a test (TRUNCATE, then
    # the post_migrate handlers again): most of a second each.
    marker = item.get_closest_marker("django_db")
    fixtures = getattr(item, "fixturenames", ())
    return bool(marker and marker.kwargs.get("transaction")) or "transactional_db" in fixtures


def markers_of(item: pytest.Item) -> set[str]:
    """The markers of a test of tests/, from its folder, what it reaches and what it costs."""
    markers: set[str] = set()
    path = item.path.relative_to(TESTS)
    markers.update(FOLDER_MARKERS.get(path.parts[0], ()))
    if isinstance(item, pytest.Function):
        fixtures = item._fixtureinfo.name2fixturedefs.values()
        roots: list[object] = [item.function, *(d.func for defs in fixtures for d in defs)]
        if item.cls is not None:
            roots.append(item.cls)
        markers |= markers_reached(roots)
        if item.originalname in SLOW.get(f"tests/{path.as_posix()}", ()):
            markers.add("slow")
    if _commits(item):
        markers.add("transactional")
    return markers


def _named_tests_exist(items: list[pytest.Item]) -> None:
    # A starter or a slow test renamed would otherwise mark nothing, silently.
    # Only what this run imported can be checked; the whole suite's run
    # checks everything, and so does tests/architecture.
    for name in STARTERS:
        module, _, attribute = name.rpartition(".")
        if module in sys.modules and not hasattr(sys.modules[module], attribute):
            raise pytest.UsageError(f"tests/conftest.py names {name}, which is gone")
    modules = {
        f"tests/{item.path.relative_to(TESTS).as_posix()}": item.module
        for item in items
        if isinstance(item, pytest.Function)
    }
    for path, functions in SLOW.items():
        for function in functions:
            if path in modules and not hasattr(modules[path], function):
                raise pytest.UsageError(
                    f"tests/conftest.py marks {path}::{function} slow, which is gone"
                )


# --- Evidence ----------------------------------------------------------------
#
# A failed test's report ends with what the servers it ran say: how each is or
# ended, and its log's last lines (tests/support/servers.py), unless the
# failure's own message has said it already; and, when a command run with
# check=True failed, what it printed, which CalledProcessError's message leaves
# out.


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    servers.begin_test()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        evidence = servers.evidence(only_untold=True)
        if evidence:
            report.sections.append(("servers", evidence))
        if call.excinfo is not None and isinstance(
            failed := call.excinfo.value, subprocess.CalledProcessError
        ):
            printed = [_text(failed.stdout), _text(failed.stderr)]
            report.sections.append(("the command's output", "\n".join(filter(None, printed))))
    return report


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # First, so that -m deselects by these markers too.
    tests = [item for item in items if item.path.is_relative_to(TESTS)]
    _named_tests_exist(tests)
    for item in tests:
        for marker in sorted(markers_of(item)):
            item.add_marker(marker)


@pytest.fixture
def catalog(db: None) -> None:
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115


@pytest.fixture
def api(db: None, catalog: None) -> Api:
    issued = create_api_client(tenant_slug="acme", name="alice")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


@pytest.fixture
def other_api(db: None, catalog: None) -> Api:
    """Another principal of the same tenant."""
    issued = create_api_client(tenant_slug="acme", name="bob")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


@pytest.fixture
def stranger_api(db: None, catalog: None) -> Api:
    """A principal of another tenant."""
    issued = create_api_client(tenant_slug="globex", name="carol")
    return Api(client=Client(), token=issued.token, principal=issued.principal)


@pytest.fixture
def order_body() -> dict[str, Any]:
    """A copy of ``ORDER`` of the test's own, to change."""
    body: dict[str, Any] = json.loads(json.dumps(ORDER))
    return body


@pytest.fixture
def broker(transactional_db: None, settings: Settings) -> None:
    """An empty queue, and retries quick enough for tests."""
    from config.celery import app

    settings.PAYMENT_RETRY_BACKOFF = 0.05
    app.control.purge()


@pytest.fixture
def worker(broker: None) -> Iterator[None]:
    with running_worker():
        yield


@pytest.fixture
def finished_operation() -> Iterator[FinishedOperation]:
    """Wait for an operation to leave ``processing``, woken by each task the worker ends."""
    from celery.signals import task_postrun

    ended = threading.Condition()

    def on_task_end(**kwargs: Any) -> None:
        with ended:
            ended.notify_all()

    task_postrun.connect(on_task_end, weak=False)

    def wait(operation_id: str, timeout: float = 30.0) -> Operation:
        deadline = time.monotonic() + timeout
        with ended:
            while (operation := Operation.objects.get(pk=operation_id)).is_finished is False:
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"operation {operation_id} still processing"
                # The timeout only guards against a notification sent between
                # the read above and this wait.
                ended.wait(timeout=min(remaining, 0.5))
        return operation

    yield wait
    task_postrun.disconnect(on_task_end)
