"""The service as deployed, in its own processes, on both of its databases.

- PostgreSQL behind gunicorn with several worker processes: one key sent
  by many clients at once still executes once.
- The embedded default (SQLite file, SQLite broker, no server installed),
  as ``make run`` starts it: the walkthrough of the README and a storm.
"""

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from orders.models import Order
from tests.support.concurrency import run_concurrently
from tests.support.http import ORDER, Api
from tests.support.live import (
    LiveService,
    base_env,
    manage,
    operation_ended,
    post_command,
    serve,
    suite_database_env,
)
from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]


def post(service: LiveService, token: str, key: str, body: dict[str, Any]) -> requests.Response:
    return post_command(service.url("/v1/orders"), body, token=token, key=key)


@pytest.fixture(scope="module")
def postgres_service(django_db_setup: None) -> Iterator[LiveService]:
    with serve(suite_database_env(), web_workers=4) as service:
        yield service


@pytest.mark.django_db(transaction=True)
def test_a_storm_across_server_processes_executes_once(
    postgres_service: LiveService, api: Api
) -> None:
    responses = run_concurrently(32, lambda i: post(postgres_service, api.token, "storm", ORDER))

    assert {r.status_code for r in responses} == {201}
    assert len({r.content for r in responses}) == 1
    assert sum("Idempotent-Replayed" not in r.headers for r in responses) == 1
    assert Order.objects.count() == 1


@pytest.fixture(scope="module")
def embedded_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveService, str]]:
    env = base_env(VAR_DIR=str(tmp_path_factory.mktemp("var")))
    manage("migrate", "--noinput", env=env)
    manage("seed_demo", env=env)
    token = manage("create_api_client", "demo", "demo", env=env).strip().splitlines()[-1]
    with serve(env, web_workers=2, celery=True) as service:
        yield service, token


def test_the_embedded_default_keeps_the_idempotency_rules(
    embedded_service: tuple[LiveService, str],
) -> None:
    service, token = embedded_service

    created = post(service, token, "walk-1", ORDER)
    replayed = post(service, token, "walk-1", ORDER)
    conflict = post(service, token, "walk-1", {**ORDER, "items": [{"sku": "ABC", "qty": 3}]})

    assert created.status_code == 201
    assert replayed.status_code == 201
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert replayed.content == created.content
    assert replayed.headers["Location"] == created.headers["Location"]
    assert conflict.status_code == 409
    assert conflict.json()["details"]["mismatch"] == ["/items/0/qty"]


def test_the_embedded_default_executes_a_storm_once(
    embedded_service: tuple[LiveService, str],
) -> None:
    service, token = embedded_service

    responses = run_concurrently(16, lambda i: post(service, token, "embedded-storm", ORDER))

    assert {r.status_code for r in responses} == {201}
    assert len({r.json()["orderId"] for r in responses}) == 1
    listing = requests.get(
        service.url("/v1/orders?pageSize=200"),
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).json()
    assert sum(o["customerId"] == ORDER["customerId"] for o in listing["results"]) == 2


def test_the_embedded_worker_charges_a_payment(embedded_service: tuple[LiveService, str]) -> None:
    service, token = embedded_service
    headers = {"Authorization": f"Bearer {token}"}
    order = post(service, token, "pay-order", ORDER).json()["order"]
    body = {"orderId": order["id"], "amount": order["totalAmount"], "currency": "RUB"}

    accepted = requests.post(
        service.url("/v1/payments"),
        json={**body, "paymentMethod": "pm_card_ok"},
        headers={**headers, "Idempotency-Key": "pay-1"},
        timeout=30,
    )
    operation = poll(service, accepted.headers["Location"], headers)

    assert accepted.status_code == 202
    assert operation["status"] == "succeeded"
    paid = requests.get(service.url(f"/v1/orders/{order['id']}"), headers=headers, timeout=10)
    assert paid.json()["status"] == "paid"


def poll(service: LiveService, location: str, headers: dict[str, str]) -> dict[str, Any]:
    """Poll an operation as a client does until it leaves ``processing``."""
    return operation_ended(service.url(location), headers)


@pytest.fixture
def throttled_service(django_db_setup: None) -> Iterator[LiveService]:
    with serve(suite_database_env(API_THROTTLE_RATE="3/day"), web_workers=1) as service:
        yield service


@pytest.mark.django_db(transaction=True)
def test_a_configured_rate_limit_answers_429_throttled(
    throttled_service: LiveService, api: Api
) -> None:
    headers = {"Authorization": f"Bearer {api.token}"}

    statuses = [
        requests.get(throttled_service.url("/v1/orders"), headers=headers, timeout=10)
        for _ in range(4)
    ]

    assert [r.status_code for r in statuses] == [200, 200, 200, 429]
    assert statuses[-1].json()["error"] == "Throttled"
    assert int(statuses[-1].headers["Retry-After"]) > 0


def test_the_readmes_walkthrough_runs_as_written(
    embedded_service: tuple[LiveService, str],
) -> None:
    # The README's walkthrough block, run with bash and curl as a reader
    # pastes it: only what it says to fill in is filled in (the token, the
    # address, the ids earlier steps answered), and each step's answer is held
    # to the status line and headers its comments show.
    service, token = embedded_service
    reader = Reader(TOKEN=token, API=service.url("").rstrip("/"))

    answers = [reader.run(command, expected) for command, expected in walkthrough_steps()]

    assert sum(answer.startswith("HTTP/1.1 ") for answer in answers) == 4
    assert '"status":"succeeded"' in answers[-1]


WALKTHROUGH = re.compile(r"^## Walkthrough.*?^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def walkthrough_steps() -> list[tuple[str, list[str]]]:
    """Each command of the walkthrough, with the comment lines that follow it."""
    block = WALKTHROUGH.search((ROOT / "README.md").read_text())
    assert block is not None, "the README has no walkthrough block"
    steps: list[tuple[str, list[str]]] = []
    command: list[str] = []
    for line in block.group(1).splitlines():
        if line.startswith("#"):
            if steps and not command:
                steps[-1][1].append(line[1:].strip())
        elif line.strip():
            command.append(line.rstrip("\\"))
            if not line.endswith("\\"):
                steps.append((" ".join(command), []))
                command = []
    return steps


class Reader:
    """A shell a reader types the walkthrough into, one command after another."""

    def __init__(self, **filled: str) -> None:
        self.filled = filled
        self.variables: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    def run(self, command: str, expected: list[str]) -> str:
        name, _, _ = command.partition("=")
        if not command.startswith("curl"):
            if name in self.filled:
                command = f"{name}={self.filled[name]}"
            elif name == "ORDER":
                command = f"ORDER={self.bodies[0]['orderId']}"
            self.variables.append(command)
            return ""
        if "op_…" in command:
            command = command.replace("op_…", self.bodies[-1]["operationId"])
        answer = self.curl(command)
        self.check(command, answer, expected)
        self.bodies.append(json.loads(answer.split("\n\n")[-1]))
        return answer

    def curl(self, command: str) -> str:
        def run() -> str:
            done = subprocess.run(
                ["/bin/bash", "-ec", "\n".join([*self.variables, command])],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            assert done.returncode == 0, f"{command}: status {done.returncode}\n{done.stderr}"
            return done.stdout

        if "-si" in command:
            return run()
        # The README's step 5 says to poll until the worker is done.
        return wait_for(
            run,
            lambda answer: '"status":"processing"' not in answer,
            30,
            interval=0.1,
            what=f"{command!r} answering an ended operation",
        )

    @staticmethod
    def check(command: str, answer: str, expected: list[str]) -> None:
        for line in expected:
            if line.startswith("HTTP/1.1 "):
                assert answer.startswith(f"HTTP/1.1 {line.split()[1]} "), (command, answer[:300])
            elif re.match(r"^[A-Z][\w-]+: \S", line) and "…" not in line:
                header = line.split("(")[0].strip()
                assert header in answer, (command, header, answer[:400])
