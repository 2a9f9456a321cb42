"""URL converters."""


class ResourceIdConverter:
    """An id in a path: a type prefix and base-36 characters (``ord_3k9…``).

    Anything else cannot name a resource, so it does not match and the
    request gets the routing 404, before it can reach the database with a
    value PostgreSQL refuses (a NUL byte) or a path longer than we store.
    """

    regex = r"[a-z]{1,8}_[0-9a-z]{1,40}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
