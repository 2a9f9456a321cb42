"""The ``Idempotency-Key`` request header."""

import re
from typing import Any

import http_sf
from django.utils.crypto import salted_hmac

from idempotency.errors import IdempotencyKeyInvalid, IdempotencyKeyRequired
from idempotency.policy import MAX_KEY_LENGTH

HEADER = "Idempotency-Key"
# A key, as the header carries it in its plain form (docs/SPECIFICATION.md §3 rule 1):
# visible ASCII but the comma. HTTP joins the lines of a header sent twice with
# a comma (RFC 9110 §5.3), and so do gunicorn and nginx: a retry that repeated
# the header would name the key ``K,K`` and execute again. With no comma in a
# key, a header sent twice, or a list of keys, is no key at all.
KEY_PATTERN = re.compile(rf"[!-+\--~]{{1,{MAX_KEY_LENGTH}}}")


def parse_idempotency_key(raw: str | None) -> str:
    """The key named by a header value, in its plain or structured-field form.

    ``7f2c`` and ``"7f2c"`` (an RFC 9651 String, as the IETF draft defines
    the header) name the same key.

    :raises IdempotencyKeyRequired: the header is absent.
    :raises IdempotencyKeyInvalid: the value is not a key.
    """
    if raw is None:
        raise IdempotencyKeyRequired()
    # Optional white space around the value is not the key's (RFC 9110 §5.5).
    value = raw.strip(" \t")
    if value.startswith('"'):
        try:
            item: Any = http_sf.parse(value.encode("ascii"), tltype="item")
        except Exception:  # the parser signals bad input with assorted errors
            raise IdempotencyKeyInvalid() from None
        value = item[0]
        if not isinstance(value, str):
            raise IdempotencyKeyInvalid()
    if not KEY_PATTERN.fullmatch(value):
        raise IdempotencyKeyInvalid()
    return value


def key_digest(raw: str | None) -> str | None:
    """A keyed digest of the key a header names, for logs: never the key itself.

    An operator follows one key's attempts by it (the client quotes its key;
    ``manage.py idempotency_key_digest`` gives its digest), and the logs
    hold no key: a key of few letters (``order-1``) could be guessed back
    from a plain hash, not from one keyed by the deployment's secret. A
    value that is no key is digested as it was sent.
    """
    if raw is None:
        return None
    try:
        key = parse_idempotency_key(raw)
    except IdempotencyKeyInvalid:
        key = raw
    return salted_hmac(_DIGEST_SALT, key, algorithm="sha256").hexdigest()[:16]


_DIGEST_SALT = "order_service.idempotency.key_digest"
