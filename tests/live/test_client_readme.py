"""client/README.md's example, run as written, twice, against the service as deployed.

The example promises that running it twice places one order and charges
it once: the key store keeps each intent's key for the service's
retention, so the second run sends the same keys and gets the first run's
answers replayed. The test takes the example's code block from the README,
runs it twice, one process after the other, with the venv's Python in one
directory (so one key store file), against gunicorn and a Celery worker,
and counts what the database and the provider's ledger hold.
"""

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from idempotency.models import IdempotencyKey
from orders.models import Order, Payment
from provider.models import LedgerEntry
from tests.support.http import Api
from tests.support.live import ROOT, LiveService, base_env, serve_with_worker

README = ROOT / "client" / "README.md"
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def readme_example() -> str:
    """The code of the README's Example section, its one python block."""
    section = README.read_text().split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    blocks: list[str] = _PYTHON_BLOCK.findall(section)
    (code,) = blocks
    return code


@pytest.fixture(scope="module")
def readme_service(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveService]:
    with serve_with_worker(tmp_path_factory.mktemp("var")) as service:
        yield service


def run_example(script: Path, service: LiveService, token: str) -> list[str]:
    """One run of the example in a process of its own; the words it prints."""
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=script.parent,
        env=base_env(ORDER_SERVICE_URL=service.base_url, ORDER_SERVICE_TOKEN=token),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.split()


def test_the_example_is_the_one_the_readme_explains() -> None:
    code = readme_example()

    assert 'token = os.environ["ORDER_SERVICE_TOKEN"]' in code
    assert 'intent="order:cart-81"' in code
    assert "SQLiteKeyStore(" in code
    assert "pip install ./client" in README.read_text()


@pytest.mark.django_db(transaction=True)
def test_the_readmes_example_run_twice_places_one_order_and_charges_it_once(
    readme_service: LiveService, api: Api, tmp_path: Path
) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example())

    first = run_example(script, readme_service, api.token)
    second = run_example(script, readme_service, api.token)

    order_id = first[0]
    assert first == [order_id, "placed", "succeeded"]
    assert second == [order_id, "replayed", "succeeded"]
    assert Order.objects.count() == 1
    assert Payment.objects.count() == 1
    assert LedgerEntry.objects.filter(kind="charge", succeeded=True).count() == 1
    # The second run sent the first run's two keys, and no other.
    assert IdempotencyKey.objects.count() == 2
