"""Which webhook URLs the service will call: the defence against server-side request forgery.

A webhook URL is chosen by a client and called by our workers, from inside
our network. A URL naming ``127.0.0.1``, ``10.0.0.5`` or the cloud's
metadata address (``169.254.169.254``) would turn the service into the
client's proxy to what only we can reach. So a URL is refused when its host
is, or resolves to, an address that is not globally routable: loopback,
private, link-local, multicast, reserved or unspecified (Python's
``ipaddress.is_global``, which also excludes shared and documentation
ranges). ``WEBHOOK_ALLOW_PRIVATE_URLS`` lifts the rule, for tests and for a
deployment whose receivers are on its own network.

**An address is judged by what it reaches** (:func:`reached`). An IPv6
address that carries an IPv4 one is delivered, by some translator or
tunnel on the way, to that IPv4 address, so it is judged as that address:

- IPv4-mapped ``::ffff:0:0/96`` and IPv4-translated ``::ffff:0:0:0/96``
  (RFC 2765): the last 32 bits;
- IPv4-compatible ``::/96`` (deprecated, RFC 4291 §2.5.5.1): the last 32
  bits, so ``::7f00:1`` is ``127.0.0.1``, and ``::1`` itself ``0.0.0.1``;
- NAT64's well-known prefix ``64:ff9b::/96`` (RFC 6052): the last 32 bits,
  so ``64:ff9b::808:808`` (``8.8.8.8``) is public;
- 6to4 ``2002::/16`` (RFC 3056): bits 16 to 48;
- Teredo ``2001::/32`` (RFC 4380): the server and the (de-obfuscated)
  client, and both must be public.

NAT64's local-use prefix ``64:ff9b:1::/48`` (RFC 8215) is refused whatever
it carries. It is for a network's own translators, which may use any
prefix length from it (/48 to /96, RFC 6052 §2.2), each putting the IPv4
address in other bits: from the address alone we cannot tell which IPv4
address it reaches, and a translator of ours would take it inside.

Python's own verdict is not enough for these prefixes, nor the same on
each version the service supports: on 3.11, ``::7f00:1``,
``::ffff:0:7f00:1``, ``64:ff9b::7f00:1``, ``2002:7f00:1::`` and
``64:ff9b:1::/48`` are all ``is_global``, and every Teredo address is
not. So the embedded address is extracted here, and judged by itself.

A zone (scope) id, ``fe80::1%eth0`` or ``[fe80::1%25eth0]`` in a URL,
names a network interface of the machine that sends: it means nothing on
the internet, and is refused whatever the deployment allows, as is a name
that resolves to a scoped address.

**A name that does not resolve in time is our failure, not the
client's** (:class:`Unresolved`, a :class:`Refused`): the endpoint's
creation answers ``503`` with ``Retry-After`` and stores nothing, and a
delivery counts the attempt as failed and retries it. A name that does
not exist (``EAI_NONAME``) is the client's mistake: ``400``.

**One tenant's slow names do not hold what another tenant's need.**
glibc's ``getaddrinfo`` cannot be cut short: asked of a DNS server that
never answers, it keeps its thread for resolv.conf's timeout times its
attempts (about 20 s), whatever the caller stopped waiting. So each lookup
runs on a thread of its own, started for it and ending with it, which the
caller waits for at most ``RESOLVE_TIMEOUT``; no pool is shared. What the
lookups still running may hold is bounded twice: ``LOOKUPS_PER_TENANT``
(4) per tenant, beyond which that tenant is answered ``Unresolved``
without a lookup being started, and ``LOOKUPS_PER_PROCESS`` (64) in all,
which bounds the threads whatever the number of tenants. Deliveries name
their tenant too (events/delivery.py): one tenant's slow names at delivery
cannot use up the lookups of the delivery worker that another tenant's
endpoints need.
``getaddrinfo`` is kept, rather than a resolver library with its own
timeout (dnspython, c-ares), because it is what resolves the name for
everything else on the machine: /etc/hosts, nsswitch and the container's
DNS are read as the operator configured them.

The rule is checked twice: when the endpoint is created, so that the
client is told at once, and again at every delivery, because a name's
addresses can change after it was checked (DNS rebinding: a name that
resolved to a public address when the endpoint was made, and to
127.0.0.1 since). At delivery the name is resolved once, and the request
is sent to the address that was checked (:class:`Target`), never resolved
again by the HTTP client.
"""

import ipaddress
import socket
import threading
from collections import Counter
from collections.abc import Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import SplitResult, urlsplit

from django.conf import settings

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address

# How long a name may take to resolve (seconds). A client chooses the name,
# and so how slow its resolver is: without a bound, a request creating an
# endpoint could hold a web thread for the resolver's own timeouts (5 s
# times its attempts, by default).
RESOLVE_TIMEOUT = 3.0
# Lookups of one tenant still running (its caller may have stopped
# waiting). An honest client creates its few endpoints (at most 16, by
# default) one at a time; four lets a few run at once, and keeps what one
# tenant can hold to a sixteenth of the process's bound.
LOOKUPS_PER_TENANT = 4
# Lookups still running in the process, every tenant and delivery counted:
# each holds a thread (an 8 MiB stack reserved, some KiB used) for up to
# about 20 s. Sixteen tenants must be slow at once to reach it.
LOOKUPS_PER_PROCESS = 64
# Retry-After of a name that did not resolve in time, in seconds. glibc
# asks a silent DNS server again after resolv.conf's timeout (5 s by
# default): a retry after that finds the answer if the second try got one,
# and a tenant over its bound has had its oldest lookups end by then, or
# is refused again at no cost (no lookup is started).
RESOLVE_RETRY_AFTER_SECONDS = 5

# The prefixes whose addresses carry an IPv4 address in their last 32 bits.
_LAST_32_BITS = tuple(
    ipaddress.IPv6Network(prefix)
    for prefix in (
        "::ffff:0:0/96",  # IPv4-mapped
        "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
        "::/96",  # IPv4-compatible, deprecated
        "64:ff9b::/96",  # NAT64, well-known
    )
)
_NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")


class Refused(Exception):
    """The URL is not one the service will call; the message says why, for the client."""


class Unresolved(Refused):
    """The host could not be resolved just now: our side's failure, worth retrying.

    A :class:`Refused`, so that a delivery counts the attempt as failed and
    retries it, as it does any refusal; the endpoint's creation answers it
    ``503`` rather than ``400``. ``retry_after`` is in seconds.
    """

    retry_after = RESOLVE_RETRY_AFTER_SECONDS


@dataclass(frozen=True)
class Target:
    """Where to send a request for a URL: the checked address, and the names to present."""

    url: str
    # The address connected to, checked; the request goes there, not to a
    # second resolution of the name.
    address: str
    # The URL's host, sent as Host and as the TLS server name.
    host: str
    port: int

    def address_url(self) -> str:
        """The URL with its host replaced by the checked address."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if ":" in self.address else self.address
        return parts._replace(netloc=f"{literal}:{self.port}").geturl()

    def host_header(self) -> str:
        parts = urlsplit(self.url)
        return parts.netloc.rpartition("@")[2]


def check_url(url: str) -> SplitResult:
    """The URL's parts, if it is an absolute http or https URL with a host.

    :raises Refused: it is not.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise Refused("Not a valid URL.") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("Must be an http or https URL.")
    if not parts.hostname:
        raise Refused("Must name a host.")
    if "%" in parts.hostname:
        raise Refused(
            "Must not name a zone id (such as %eth0): it names a network interface of the "
            "sending machine, not an address on the internet."
        )
    if parts.username is not None or parts.password is not None:
        raise Refused("Must not carry credentials: the signature authenticates the deliveries.")
    if parts.fragment:
        raise Refused("Must not have a fragment.")
    if port == 0:
        raise Refused("Must not name port 0.")
    return parts


def resolve(url: str, *, tenant: Hashable | None = None) -> Target:
    """Where a delivery to ``url`` goes: its host resolved once, every address checked.

    ``tenant`` (its id) is whose lookup it is, for ``LOOKUPS_PER_TENANT``;
    None counts it against ``LOOKUPS_PER_PROCESS`` alone.

    :raises Unresolved: the host did not resolve within ``RESOLVE_TIMEOUT``,
        its resolver failed for now (``EAI_AGAIN``), or too many lookups
        are still running (the tenant's, or the process's).
    :raises Refused: the URL is not valid, its host does not exist, or it
        resolves to an address that is not public (unless
        ``WEBHOOK_ALLOW_PRIVATE_URLS``) or to a scoped one.
    """
    parts = check_url(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    found = _addresses_of(host, port, tenant)
    for address in found:
        if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
            raise Refused(
                f"The host resolves to {address}, an address scoped to one network "
                "interface of the sending machine."
            )
        if not settings.WEBHOOK_ALLOW_PRIVATE_URLS and not is_public(address):
            through = [str(ip) for ip in reached(address) if ip != address]
            reaching = f" (which reaches {' and '.join(through)})" if through else ""
            # Named for a developer whose receiver listens on their own
            # machine, for whom the refusal is otherwise a dead end.
            raise Refused(
                f"The host resolves to {address}{reaching}, which is not a public address: "
                "the service calls only addresses on the internet, unless it runs with "
                "WEBHOOK_ALLOW_PRIVATE_URLS=true (for receivers on its own network)."
            )
    return Target(url=url, address=str(found[0]), host=host, port=port)


def lookup(host: str, port: int) -> list[Any]:
    """The host's addresses as ``getaddrinfo`` gives them; tests replace it (DNS is the edge).

    :raises OSError: ``socket.gaierror`` and the like, as ``getaddrinfo`` does.
    """
    return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)


# Failures of the resolver rather than of the name: worth a retry.
_TRANSIENT = frozenset(
    code
    for code in (
        getattr(socket, "EAI_AGAIN", None),
        getattr(socket, "EAI_MEMORY", None),
        getattr(socket, "EAI_SYSTEM", None),
    )
    if code is not None
)


def _addresses_of(host: str, port: int, tenant: Hashable | None) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        pass
    try:
        found = _lookup_in_time(host, port, tenant)
    except socket.gaierror as failed:
        if failed.errno in _TRANSIENT:
            raise Unresolved("The host could not be resolved just now.") from None
        raise Refused("The host does not resolve.") from None
    except (OSError, UnicodeError):
        raise Refused("The host does not resolve.") from None
    addresses = list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in found))
    if not addresses:
        raise Refused("The host does not resolve.")
    return addresses


_running_lock = threading.Lock()
# Lookups still running, by tenant (None: a delivery's), and in all.
_running: Counter[Hashable | None] = Counter()


def _lookup_in_time(host: str, port: int, tenant: Hashable | None) -> list[Any]:
    """:func:`lookup` on a thread of its own, waited for ``RESOLVE_TIMEOUT`` at most.

    :raises Unresolved: too many lookups running, or this one not done in time.
    :raises OSError, UnicodeError: from :func:`lookup`.
    """
    with _running_lock:
        if sum(_running.values()) >= LOOKUPS_PER_PROCESS:
            raise Unresolved("Too many host names are being resolved just now.")
        if tenant is not None and _running[tenant] >= LOOKUPS_PER_TENANT:
            raise Unresolved(
                f"{LOOKUPS_PER_TENANT} of your host names are still being resolved: "
                "retry once they are."
            )
        _running[tenant] += 1
    answer: Future[list[Any]] = Future()

    def run() -> None:
        try:
            answer.set_result(lookup(host, port))
        except BaseException as exc:  # handed to the caller, who raises it
            answer.set_exception(exc)
        finally:
            _finished(tenant)

    try:
        # A daemon: a lookup the caller gave up on never holds up the process's exit.
        threading.Thread(target=run, name=f"resolve {host}"[:64], daemon=True).start()
    except RuntimeError:
        _finished(tenant)
        raise Unresolved("No thread could be started to resolve the host.") from None
    try:
        return answer.result(timeout=RESOLVE_TIMEOUT)
    except FutureTimeout:
        raise Unresolved(f"The host did not resolve within {RESOLVE_TIMEOUT:g} s.") from None


def _finished(tenant: Hashable | None) -> None:
    with _running_lock:
        _running[tenant] -= 1
        if not _running[tenant]:
            del _running[tenant]


def running_lookups(tenant: Hashable | None = None) -> int:
    """How many lookups are still running: the tenant's, or with None, the process's."""
    with _running_lock:
        return _running[tenant] if tenant is not None else sum(_running.values())


def reached(address: IPAddress) -> list[IPAddress]:
    """The addresses a packet to ``address`` ends at, as far as the address itself says.

    An IPv6 address that carries an IPv4 one reaches that one (Teredo: its
    server and its client); any other address reaches itself.
    """
    if isinstance(address, ipaddress.IPv4Address):
        return [address]
    if any(address in prefix for prefix in _LAST_32_BITS):
        return [ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)]
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        return list(address.teredo)
    return [address]


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` reaches only addresses on the internet (the module's rule)."""
    if isinstance(address, ipaddress.IPv6Address) and address in _NAT64_LOCAL_USE:
        return False
    return all(ip.is_global and not ip.is_multicast for ip in reached(address))
