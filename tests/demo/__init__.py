"""``make demo``: exactly once over a bad network, told by the database.

The demo runs N intended actions (place an order, pay it, wait for the
charge) through :mod:`order_service_client`, with a fault proxy between
the client and the service that drops a share of the answers after the
service has given them and resets a share of the connections before their
request goes on. The client cannot tell a lost answer from a request that
never arrived: it sends the same command again under the same key, until
it gets an answer.

At the end the demo counts what happened from the service's database and
the payment provider's ledger, never from the client's own bookkeeping,
and prints one line: ``demo: N orders, N charges, R retries, 0 duplicates``.
"""
