"""The service's idempotency policy, read from the service itself.

``GET /v1/idempotency-policy`` (docs/SPECIFICATION.md §3 rule 15) answers the
numbers a client needs to retry safely, from the service's running
settings. The client reads it before its first command and again when
its ``Cache-Control: max-age`` has passed, and uses one of them:
``retentionSeconds``, how long the service keeps a key. No attempt under a
key starts past it, counted from the key's first use
(:class:`~order_service_client.errors.KeyLifetimeOver`): after it, the
service may have forgotten the key, and the same request would be a new
command.

Until the policy has been read (the service was unreachable, or is an
older one that does not publish it), the client counts with its key
store's ``retention`` (24 h by default, the service's default).
"""

import re
from dataclasses import dataclass

import httpx

__all__ = ["POLICY_PATH", "ServicePolicy"]

POLICY_PATH = "/v1/idempotency-policy"

# How long a policy is kept when its answer says nothing (no max-age), and
# how long the client waits before asking again a service that publishes
# none. The contract caps the service's own max-age at an hour, and so
# does the client, whatever a proxy in between says.
_DEFAULT_MAX_AGE_S = 300.0
_LONGEST_MAX_AGE_S = 3600.0

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)


@dataclass(frozen=True)
class ServicePolicy:
    """What the service promises of keys, as it published it.

    :ivar retention_seconds: how long a key is kept from its first use.
    :ivar wait_seconds: how long a copy of a command still running waits.
    :ivar key_max_length: the longest key the service accepts.
    :ivar commands: the routes that require a key, ``("POST", "/v1/orders")``.
    """

    retention_seconds: float
    wait_seconds: float
    key_max_length: int
    commands: frozenset[tuple[str, str]]

    @classmethod
    def from_response(cls, response: httpx.Response) -> "ServicePolicy | None":
        """The policy of a ``200`` answer, or ``None`` when it is not one."""
        if response.status_code != 200:
            return None
        try:
            body = response.json()
            return cls(
                retention_seconds=float(body["retentionSeconds"]),
                wait_seconds=float(body["waitSeconds"]),
                key_max_length=int(body["keyMaxLength"]),
                commands=frozenset((c["method"], c["path"]) for c in body["commands"]),
            )
        except (ValueError, TypeError, KeyError):
            # Not the policy (a proxy's page, another service): counted as none.
            return None


def max_age(response: httpx.Response) -> float:
    """Seconds the answer may be kept: its ``max-age``, at most an hour."""
    found = _MAX_AGE.search(response.headers.get("Cache-Control", ""))
    seconds = float(found.group(1)) if found else _DEFAULT_MAX_AGE_S
    return min(seconds, _LONGEST_MAX_AGE_S)
