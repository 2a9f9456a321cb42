"""client/README.md's examples: every ```python block, run as written against a live service.

Each block of the README is an example that stands alone. The test takes
every one from the file, writes it to a file of its own and runs it with
the venv's Python, in a process and a directory of its own, with
ORDER_SERVICE_URL and ORDER_SERVICE_TOKEN set, against gunicorn and a
Celery worker on the suite's database; the service allows webhook URLs on
loopback, as the README tells a reader to set it for a local receiver.
Each block has a check here, found by the section it is in, of what the
README says it does; a block without one fails, so an example added to
the README is run and checked from the day it is written:

- Example: run twice, one process after the other in one directory (so one
  key store file), it places one order and charges it once: the second run
  sends the first run's keys and gets its answers replayed.
- API: an order under an id of the client's, read and cancelled on the
  version read; run again, the id answers the order and nothing is sent.
- Errors: an unknown SKU is raised as `Unprocessable`, and nothing is placed.
- Async: the asyncio twin places an order and lists it; run again, replayed.
- Reading the event feed: run twice, it counts each event once.
- Webhooks: the receiver, started as the README says with the secret of an
  endpoint pointed at it, records the `order.created` of an order placed.

A block that fails shows what it printed. The README's ```sh blocks are
run elsewhere: tests/docs/test_readme_examples.py says where.
"""

import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from idempotency.models import IdempotencyKey
from orders.models import Order, Payment
from provider.models import LedgerEntry
from tests.support import servers
from tests.support.http import ORDER, Api
from tests.support.live import (
    ROOT,
    LiveService,
    base_env,
    free_port,
    post_command,
    serve,
    suite_database_env,
)
from tests.support.waits import wait_for

README = ROOT / "client" / "README.md"
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Block:
    """A python block of the README: the section it is in (and its place there), its code."""

    name: str
    code: str


def python_blocks() -> list[Block]:
    """Every python block of the README, named by its section (``"Errors"``, ``"API #2"``)."""
    blocks = []
    for section in re.split(r"^## ", README.read_text(), flags=re.MULTILINE)[1:]:
        heading = section.splitlines()[0]
        for at, code in enumerate(_PYTHON_BLOCK.findall(section), start=1):
            blocks.append(Block(heading if at == 1 else f"{heading} #{at}", code))
    return blocks


@pytest.fixture(scope="module")
def readme_service(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveService]:
    """gunicorn and a worker of both queues, calling receivers on loopback as a reader's would."""
    from django.conf import settings

    from config.celery import app

    env = suite_database_env(
        CELERY_BROKER_URL=settings.CELERY_BROKER_URL,
        VAR_DIR=str(tmp_path_factory.mktemp("var")),
        DEBUG="0",
        WEBHOOK_ALLOW_PRIVATE_URLS="true",
    )
    # Messages of earlier runs name operations that no longer exist.
    app.control.purge()
    with serve(env, web_workers=2, celery=True) as service:
        yield service


@dataclass(frozen=True)
class Reader:
    """A reader who saved a block as a file in a directory and runs it, as the README says."""

    service: LiveService
    token: str
    directory: Path

    def save(self, block: Block, name: str = "example.py") -> Path:
        script = self.directory / name
        script.write_text(block.code)
        return script

    def env(self, **more: str) -> dict[str, str]:
        return base_env(
            ORDER_SERVICE_URL=self.service.base_url, ORDER_SERVICE_TOKEN=self.token, **more
        )

    def run(self, block: Block) -> list[str]:
        """One run of ``block`` in a process of its own; the lines it prints."""
        script = self.save(block)
        result = subprocess.run(
            [sys.executable, str(script)],
            cwd=self.directory,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, (
            f"client/README.md's block in {block.name!r} failed:\n{result.stdout}{result.stderr}"
        )
        return result.stdout.splitlines()


# --- What each block promises ------------------------------------------------------


def check_example(block: Block, reader: Reader) -> None:
    first = reader.run(block)[0].split()
    second = reader.run(block)[0].split()

    order_id = first[0]
    assert first == [order_id, "placed", "succeeded"]
    assert second == [order_id, "replayed", "succeeded"]
    assert Order.objects.count() == 1
    assert Payment.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="charge", succeeded=True).count() == 1
    # The second run sent the first run's two keys, and no other.
    assert IdempotencyKey.objects.count() == 2


def check_versions(block: Block, reader: Reader) -> None:
    first = reader.run(block)
    second = reader.run(block)

    assert (first, second) == (["201 cancelled"], ["200 cancelled"])
    assert list(Order.objects.values_list("id", "status")) == [("ord_cart-81", "cancelled")]


def check_errors(block: Block, reader: Reader) -> None:
    (printed,) = reader.run(block)

    assert printed.startswith("UnknownSku "), printed
    assert Order.objects.count() == 0


def check_async(block: Block, reader: Reader) -> None:
    first = reader.run(block)
    second = reader.run(block)

    order_id = first[0].split()[0]
    assert first == [f"{order_id} False", f"{order_id} pending"]
    assert second == [f"{order_id} True", f"{order_id} pending"]
    assert Order.objects.count() == 1


def check_feed(block: Block, reader: Reader) -> None:
    placed = post_command(reader.service.url("/v1/orders"), ORDER, token=reader.token, key="k-1")
    assert placed.status_code == 201, placed.text

    first = reader.run(block)
    again = reader.run(block)

    assert first == ["1 new order.created=1"]
    assert again == ["0 new order.created=1"]


def check_receiver(block: Block, reader: Reader) -> None:
    port = free_port()
    endpoint = {"url": f"http://127.0.0.1:{port}/", "eventTypes": ["*"]}
    created = post_command(
        reader.service.url("/v1/webhook-endpoints"), endpoint, token=reader.token, key="hook-1"
    )
    assert created.status_code == 201, created.text
    script = reader.save(block, "receiver.py")
    # As the README says: WEBHOOK_SECRET=whsec_… python receiver.py, on its PORT.
    receiver = servers.start(
        "the README's webhook receiver",
        [sys.executable, script.name],
        log=reader.directory / "receiver.log",
        cwd=reader.directory,
        env=reader.env(WEBHOOK_SECRET=created.json()["secret"], PORT=str(port)),
    )
    try:
        # The port opens when the receiver is ready; there is no event to wait on.
        wait_for(
            lambda: socket.create_connection(("127.0.0.1", port), timeout=1).close(),
            lambda _: True,
            30,
            interval=0.05,
            what="the receiver listening",
            ignoring=(OSError,),
        )
        placed = post_command(
            reader.service.url("/v1/orders"), ORDER, token=reader.token, key="k-1"
        )
        assert placed.status_code == 201, placed.text
        log = reader.directory / "events.log"
        lines = wait_for(
            lambda: log.read_text().splitlines() if log.exists() else [],
            bool,
            30,
            interval=0.05,
            what="the receiver recording the order's event",
        )
    finally:
        servers.stop([receiver])

    event_id = lines[0].split()[0]
    assert lines == [f"{event_id} order.created {placed.headers['Location']}"]


CHECKS: dict[str, Callable[[Block, Reader], None]] = {
    "Example": check_example,
    "API": check_versions,
    "Errors": check_errors,
    "Async": check_async,
    "Reading the event feed": check_feed,
    "Webhooks: verifying and handling deliveries": check_receiver,
}


def test_every_check_is_of_a_block_the_readme_has() -> None:
    assert set(CHECKS) <= {block.name for block in python_blocks()}


def test_the_example_is_the_one_the_readme_explains() -> None:
    (example,) = [block for block in python_blocks() if block.name == "Example"]

    assert 'token = os.environ["ORDER_SERVICE_TOKEN"]' in example.code
    assert 'intent="order:cart-81"' in example.code
    assert "SQLiteKeyStore(" in example.code


@pytest.mark.parametrize("block", python_blocks(), ids=lambda block: block.name)
@pytest.mark.django_db(transaction=True)
def test_each_python_block_runs_and_does_what_the_readme_says(
    block: Block, readme_service: LiveService, api: Api, tmp_path: Path
) -> None:
    check = CHECKS.get(block.name)
    assert check is not None, (
        f"client/README.md has a python block in {block.name!r} that no check here runs: "
        f"add one to CHECKS, of what the README says it does"
    )

    check(block, Reader(readme_service, api.token, tmp_path))
