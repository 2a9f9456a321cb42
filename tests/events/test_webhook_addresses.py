"""Webhook URLs are judged by the address they reach, and resolved without a shared pool.

events/addresses.py; docs/SPECIFICATION.md §4 rule 13. DNS is the edge of
the world: where a name must resolve slowly, or to a chosen address,
``events.addresses.lookup`` is replaced (glibc's resolver reads
/etc/resolv.conf, which a test cannot point at a server of its own).
"""

import ipaddress
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from pytest_django import Settings

from events import addresses
from events.models import WebhookEndpoint
from idempotency.models import IdempotencyKey
from tests.support.http import Api, body_of, problem

# Every form an IPv6 address may carry an IPv4 one in, each for what it
# reaches; and the plain forms around them. (address, public?)
FORMS = [
    # IPv4-compatible (::/96, deprecated): Python 3.11 calls these global.
    ("::7f00:1", False),
    ("::127.0.0.1", False),
    ("::a00:1", False),
    ("::808:808", True),
    # IPv4-mapped.
    ("::ffff:127.0.0.1", False),
    ("::ffff:10.0.0.1", False),
    ("::ffff:192.168.1.1", False),
    ("::ffff:169.254.169.254", False),
    ("::ffff:8.8.8.8", True),
    # IPv4-translated (::ffff:0:0:0/96).
    ("::ffff:0:7f00:1", False),
    ("::ffff:0:a00:1", False),
    ("::ffff:0:808:808", True),
    # NAT64, the well-known prefix: the last 32 bits.
    ("64:ff9b::7f00:1", False),
    ("64:ff9b::a00:1", False),
    ("64:ff9b::c0a8:101", False),
    ("64:ff9b::a9fe:a9fe", False),
    ("64:ff9b::808:808", True),
    # NAT64, local use (RFC 8215): refused whatever it carries.
    ("64:ff9b:1::808:808", False),
    ("64:ff9b:1:0:8:808:800::", False),
    # 6to4: bits 16 to 48.
    ("2002:7f00:1::", False),
    ("2002:a00:1::", False),
    ("2002:c0a8:101::1", False),
    ("2002:a9fe:a9fe::", False),
    ("2002:808:808::", True),
    # Teredo: server 65.54.227.120 and the client XOR-ed; both must be public.
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", False),  # client 192.0.2.45
    ("2001:0:a00:1:0:ffff:f7f7:f7f7", False),  # server 10.0.0.1, client 8.8.8.8
    ("2001:0:4136:e378:0:ffff:f5ff:fefe", False),  # client 10.0.1.1
    ("2001:0:4136:e378:0:ffff:f7f7:f7f7", True),  # client 8.8.8.8
    # Plain IPv6 and IPv4.
    ("::1", False),
    ("::", False),
    ("fe80::1", False),
    ("fc00::1", False),
    ("ff02::1", False),
    ("2606:4700:4700::1111", True),
    ("127.0.0.1", False),
    ("10.0.0.1", False),
    ("169.254.169.254", False),
    ("224.0.0.1", False),
    ("8.8.8.8", True),
]


def _url(address: str) -> str:
    return f"http://[{address}]:8080/hooks" if ":" in address else f"http://{address}:8080/hooks"


@pytest.mark.parametrize(("address", "public"), FORMS)
def test_an_address_is_judged_by_what_it_reaches(
    settings: Settings, address: str, public: bool
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False

    if public:
        target = addresses.resolve(_url(address))
        assert ipaddress.ip_address(target.address) == ipaddress.ip_address(address)
    else:
        with pytest.raises(addresses.Refused, match="not a public address") as refused:
            addresses.resolve(_url(address))
        assert not isinstance(refused.value, addresses.Unresolved)


def test_the_refusal_names_the_address_reached(settings: Settings) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False

    with pytest.raises(addresses.Refused) as refused:
        addresses.resolve("http://[64:ff9b::a9fe:a9fe]/latest/meta-data")

    assert "64:ff9b::a9fe:a9fe (which reaches 169.254.169.254)" in str(refused.value)


@pytest.mark.parametrize(
    "url", ["http://[fe80::1%25eth0]:8080/hooks", "http://[2606:4700:4700::1111%25eth0]/hooks"]
)
def test_a_zone_id_is_refused_even_where_private_urls_are_allowed(
    settings: Settings, url: str
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True

    with pytest.raises(addresses.Refused, match="zone id"):
        addresses.resolve(url)


def _answers(*found: str) -> Callable[[str, int], list[Any]]:
    """A ``lookup`` that answers every name with ``found``."""

    def lookup(host: str, port: int) -> list[Any]:
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in found
        ]

    return lookup


def test_a_name_is_judged_by_every_address_it_resolves_to(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    monkeypatch.setattr(addresses, "lookup", _answers("8.8.8.8", "2002:a00:1::"))

    with pytest.raises(addresses.Refused, match=r"2002:a00:1:: \(which reaches 10.0.0.1\)"):
        addresses.resolve("https://mixed.example/hooks")


def test_a_name_that_resolves_to_a_scoped_address_is_refused(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = True
    monkeypatch.setattr(addresses, "lookup", _answers("fe80::1%lo"))

    with pytest.raises(addresses.Refused, match="scoped to one network interface"):
        addresses.resolve("https://scoped.example/hooks")


@pytest.mark.parametrize(
    ("errno", "unresolved"),
    [(socket.EAI_NONAME, False), (socket.EAI_FAIL, False), (socket.EAI_AGAIN, True)],
)
def test_a_name_that_does_not_exist_is_refused_and_a_failing_resolver_is_ours(
    monkeypatch: pytest.MonkeyPatch, errno: int, unresolved: bool
) -> None:
    def lookup(host: str, port: int) -> list[Any]:
        raise socket.gaierror(errno, "from the resolver")

    monkeypatch.setattr(addresses, "lookup", lookup)

    with pytest.raises(addresses.Refused) as refused:
        addresses.resolve("https://name.example/hooks")

    assert isinstance(refused.value, addresses.Unresolved) is unresolved


# --- Through the API -----------------------------------------------------------


def subscribe(api: Api, url: str, key: str) -> Any:
    return api.post("/v1/webhook-endpoints", {"url": url, "eventTypes": ["*"]}, key=key)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "address", ["::7f00:1", "::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "::ffff:0:7f00:1"]
)
def test_an_endpoint_whose_address_reaches_inside_is_400_and_nothing_is_made(
    api: Api, settings: Settings, address: str
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False

    response = subscribe(api, f"http://[{address}]:8000/hooks", key="K")

    assert response.status_code == 400
    assert problem(response)["error"] == "ValidationError"
    assert "127.0.0.1" in problem(response)["details"]["url"][0]
    assert not WebhookEndpoint.objects.exists()


class SlowDns:
    """``slow.example`` resolves only once released; every other name at once, publicly."""

    PUBLIC = "192.0.32.10"

    def __init__(self) -> None:
        self.released = threading.Event()

    def lookup(self, host: str, port: int) -> list[Any]:
        if host == "slow.example":
            self.released.wait()
        return _answers(self.PUBLIC)(host, port)


@pytest.fixture
def slow_dns(monkeypatch: pytest.MonkeyPatch, settings: Settings) -> Iterator[SlowDns]:
    settings.WEBHOOK_ALLOW_PRIVATE_URLS = False
    dns = SlowDns()
    monkeypatch.setattr(addresses, "lookup", dns.lookup)
    # A slow name's caller gives up quickly here: the test waits out each one.
    monkeypatch.setattr(addresses, "RESOLVE_TIMEOUT", 0.2)
    yield dns
    dns.released.set()
    _join_lookups()


def _join_lookups() -> None:
    for thread in threading.enumerate():
        if thread.name.startswith("resolve "):
            thread.join(timeout=10)
    assert addresses.running_lookups() == 0


def _assert_unavailable(response: Any) -> None:
    assert response.status_code == 503
    assert problem(response)["error"] == "ServiceUnavailable"
    assert response["Retry-After"] == str(addresses.RESOLVE_RETRY_AFTER_SECONDS)


@pytest.mark.django_db
def test_one_tenants_slow_names_leave_another_tenant_its_lookups(
    api: Api, stranger_api: Api, slow_dns: SlowDns
) -> None:
    tenant = api.principal.tenant_id

    slow = [subscribe(api, "https://slow.example/hooks", key=f"A{n}") for n in range(8)]
    running = addresses.running_lookups(tenant)
    other = subscribe(stranger_api, "https://fast.example/hooks", key="B")
    beyond = subscribe(api, "https://fast.example/hooks", key="A-fast")

    for response in slow:
        _assert_unavailable(response)
    assert "did not resolve within 0.2 s" in problem(slow[0])["message"]
    assert "4 of your host names are still being resolved" in problem(slow[4])["message"]
    # Four started, and are still running: the next four started none.
    assert running == addresses.LOOKUPS_PER_TENANT == 4
    assert other.status_code == 201
    _assert_unavailable(beyond)
    assert addresses.running_lookups(tenant) == 4
    assert list(WebhookEndpoint.objects.values_list("tenant", flat=True)) == [
        stranger_api.principal.tenant_id
    ]
    assert not IdempotencyKey.objects.filter(principal=api.principal).exists()


@pytest.mark.django_db
def test_a_retry_after_a_slow_name_resolves_it_afresh(api: Api, slow_dns: SlowDns) -> None:
    labels = {"command": "POST /v1/webhook-endpoints", "outcome": "unavailable"}
    unavailable = REGISTRY.get_sample_value("idempotency_outcomes_total", labels) or 0.0

    first = subscribe(api, "https://slow.example/hooks", key="K")
    slow_dns.released.set()
    _join_lookups()

    retried = subscribe(api, "https://slow.example/hooks", key="K")

    _assert_unavailable(first)
    assert REGISTRY.get_sample_value("idempotency_outcomes_total", labels) == unavailable + 1
    assert retried.status_code == 201
    assert not retried.has_header("Idempotent-Replayed")
    assert body_of(retried)["url"] == "https://slow.example/hooks"
    assert WebhookEndpoint.objects.count() == 1


def test_the_process_bounds_every_tenants_lookups_together(
    monkeypatch: pytest.MonkeyPatch, slow_dns: SlowDns
) -> None:
    monkeypatch.setattr(addresses, "LOOKUPS_PER_PROCESS", 3)
    for tenant in range(3):
        with pytest.raises(addresses.Unresolved, match="did not resolve"):
            addresses.resolve("https://slow.example/hooks", tenant=tenant)

    with pytest.raises(addresses.Unresolved, match="Too many host names"):
        addresses.resolve("https://fast.example/hooks", tenant=99)

    assert addresses.running_lookups() == 3
