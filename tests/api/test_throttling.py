"""The rate limit's counter in the database: exact under concurrency, bounded in size."""

import time

import pytest
from django.test import RequestFactory
from pytest_django import DjangoAssertNumQueries, Settings
from rest_framework.request import Request

from api.models import RateLimitWindow
from api.throttling import PrincipalRateThrottle, count_hit
from tests.support.concurrency import run_concurrently
from tests.support.http import Api

DAY = 86400


def request_of(api: Api) -> Request:
    request = Request(RequestFactory().get("/v1/orders"))
    # A principal, not a Django user, is what authentication sets here.
    request.user = api.principal  # type: ignore[assignment]
    return request


@pytest.fixture
def rate(settings: Settings) -> str:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"principal": "3/day"},
    }
    return "3/day"


def this_window() -> int:
    return int(time.time() // DAY) * DAY


@pytest.mark.django_db(transaction=True)
def test_concurrent_hits_each_read_their_own_count() -> None:
    # Threads with a connection each, released together: no two see the
    # same count, and none is lost.
    counts = run_concurrently(32, lambda _: count_hit("principal:1", 0))

    assert sorted(counts) == list(range(1, 33))
    assert RateLimitWindow.objects.get(ident="principal:1", window_start=0).hits == 32


@pytest.mark.django_db
def test_the_limit_lets_exactly_its_count_through_then_says_how_long_to_wait(
    api: Api, rate: str, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    throttle = PrincipalRateThrottle()
    request = request_of(api)
    allowed = [throttle.allow_request(request, None)]
    # After a window's first request, one statement per request.
    with django_assert_num_queries(3):
        allowed += [throttle.allow_request(request, None) for _ in range(3)]

    assert allowed == [True, True, True, False]
    assert 0 < (throttle.wait() or 0) <= DAY


@pytest.mark.django_db
def test_principals_are_counted_apart(api: Api, other_api: Api, rate: str) -> None:
    throttle = PrincipalRateThrottle()
    for _ in range(3):
        throttle.allow_request(request_of(api), None)

    assert throttle.allow_request(request_of(other_api), None)
    assert not throttle.allow_request(request_of(api), None)


@pytest.mark.django_db
def test_a_new_window_clears_windows_older_than_the_previous_one(api: Api, rate: str) -> None:
    now = this_window()
    for ident, start in [("principal:gone", now - 2 * DAY), ("principal:other", now - DAY)]:
        RateLimitWindow.objects.create(ident=ident, window_start=start, hits=5)

    PrincipalRateThrottle().allow_request(request_of(api), None)

    kept = set(RateLimitWindow.objects.values_list("ident", "window_start"))
    assert kept == {("principal:other", now - DAY), (f"principal:{api.principal.pk}", now)}


@pytest.mark.django_db
def test_no_rate_no_query(
    api: Api, settings: Settings, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"principal": None},
    }
    with django_assert_num_queries(0):
        assert PrincipalRateThrottle().allow_request(request_of(api), None)


def test_the_throttle_is_off_unless_a_rate_is_set() -> None:
    # The suite runs without API_THROTTLE_RATE: no throttle class at all.
    from django.conf import settings

    assert settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] == []
