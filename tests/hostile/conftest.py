"""Fixtures of the hostile-client tests that drive the service as deployed."""

from collections.abc import Iterator

import pytest

from tests.support.edge import serve_behind_nginx
from tests.support.live import LiveService, suite_database_env


@pytest.fixture(scope="module")
def stack(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveService, LiveService]]:
    """(nginx, gunicorn) on the test database, for one module's tests."""
    with serve_behind_nginx(suite_database_env(), tmp_path_factory.mktemp("nginx")) as services:
        yield services
