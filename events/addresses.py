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
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from django.conf import settings

# How long a name may take to resolve (seconds). A client chooses the name,
# and so how slow its resolver is: without a bound, a request creating an
# endpoint could hold a web thread for the resolver's own timeouts (5 s
# times its attempts, by default).
RESOLVE_TIMEOUT = 3.0
_resolvers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="resolve")


class Refused(Exception):
    """The URL is not one the service will call; the message says why, for the client."""


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
    if parts.username is not None or parts.password is not None:
        raise Refused("Must not carry credentials: the signature authenticates the deliveries.")
    if parts.fragment:
        raise Refused("Must not have a fragment.")
    if port == 0:
        raise Refused("Must not name port 0.")
    return parts


def resolve(url: str) -> Target:
    """Where a delivery to ``url`` goes: its host resolved once, every address checked.

    :raises Refused: the URL is not valid, its host does not resolve in
        time, or it resolves to an address that is not global (unless
        ``WEBHOOK_ALLOW_PRIVATE_URLS``).
    """
    parts = check_url(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    addresses = _addresses_of(host, port)
    if not settings.WEBHOOK_ALLOW_PRIVATE_URLS:
        for address in addresses:
            if not _is_public(address):
                raise Refused(
                    f"The host resolves to {address}, which is not a public address: "
                    "the service calls only addresses on the internet."
                )
    return Target(url=url, address=addresses[0], host=host, port=port)


def _addresses_of(host: str, port: int) -> list[str]:
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return [str(literal)]
    lookup = _resolvers.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
    try:
        found = lookup.result(timeout=RESOLVE_TIMEOUT)
    except FutureTimeout:
        raise Refused(f"The host did not resolve within {RESOLVE_TIMEOUT:g} s.") from None
    except (OSError, UnicodeError):
        raise Refused("The host does not resolve.") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not addresses:
        raise Refused("The host does not resolve.")
    return addresses


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        # ::ffff:127.0.0.1 is 127.0.0.1.
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast
