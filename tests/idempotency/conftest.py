"""Fixtures the idempotency rules' tests share."""

from collections.abc import Iterator

import pytest

from tests.support import probes


@pytest.fixture
def slow_command() -> Iterator[None]:
    """The probe's slow command (tests.support.probes) armed, and released at the end."""
    probes.slow_command_started.clear()
    probes.slow_command_release.clear()
    yield
    probes.slow_command_release.set()
