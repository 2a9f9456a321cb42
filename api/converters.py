"""URL converters."""


class ResourceIdConverter:
    """An id in a path: up to 68 URL-safe characters.

    Ours are ``ord_3k9…`` (29 characters); a client may choose ``ord_`` and 64.

    A segment that no id can be (a NUL byte, which PostgreSQL refuses, or a
    path longer than we store) does not match, so it gets the routing 404
    before it reaches the database. Any other unknown id is routed as usual:
    authenticated first, then answered 404 like a missing resource.
    """

    regex = r"[A-Za-z0-9._~-]{1,68}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
