"""The order service, as deployed (gunicorn, four workers, PostgreSQL), passes every check.

The kit checks from outside, as it would any API: two principals' tokens
and the base URL, nothing of the database. None of its checks may be
skipped here: the service publishes its policy and answers the key look-up.
"""

from collections.abc import Iterator

import pytest
from idempotency_conformance import Options, Status, render_text, run_checks

from tests.support.http import Api
from tests.support.live import LiveService, serve, suite_database_env


@pytest.fixture(scope="module")
def service(django_db_setup: None) -> Iterator[LiveService]:
    with serve(suite_database_env(), web_workers=4) as service:
        yield service


@pytest.mark.django_db(transaction=True)
def test_the_service_passes_every_check_of_the_kit(
    service: LiveService, api: Api, other_api: Api
) -> None:
    # Two principals of one tenant (tests/conftest.py's fixtures, committed
    # for gunicorn to see): keys are scoped by principal, not by tenant.
    options = Options(base_url=service.base_url, token=api.token, other_token=other_api.token)

    report = run_checks(options)

    not_passed = [(r.id, r.status.value) for r in report.results if r.status is not Status.PASS]
    assert not_passed == [], render_text(report)
