"""The OpenAPI machinery every endpoint shares: drf-spectacular, taught the house rules.

One module per concern:

- :mod:`api.openapi.strict`: input described as strictly as
  :class:`api.fields.StrictSerializer` validates it (a schema extension).
- :mod:`api.openapi.problems`: the error body (:class:`~api.openapi.problems.Problem`)
  and each error an endpoint documents (:class:`~api.openapi.problems.Refusal`),
  its example rendered by the service's own error handler.
- :mod:`api.openapi.parameters`: the parameters and response headers that
  endpoints share, and the refusals that go with them.
- :mod:`api.openapi.reads`: :func:`~api.openapi.reads.read_schema`, everything
  the API promises of every read; commands add the idempotency layer's
  part (idempotency/schema.py).
- :mod:`api.openapi.hooks`: the post-processing hooks (camelCase path
  parameters, required output members, links).

What belongs to one app (its endpoints' decorators, its links) lives in
that app's ``schema.py``.
"""
