"""``make demo``: exactly once over a bad network, told by the database.

The demo runs N intended actions (place an order, pay it, wait for the
charge) through :mod:`order_service_client`, with a fault proxy between
the client and the service that drops a share of the answers after the
service has given them and resets a share of the connections before their
request goes on. The client cannot tell a lost answer from a request that
never arrived: it sends the same command again under the same key, until
it gets an answer.

Beside it, a webhook receiver on 127.0.0.1 is subscribed to every event
(through the API, under an idempotency key) and handles each delivery as
the client's README says: verified with ``WebhookVerifier``, then run once
per event through a ``SQLiteInbox``. The proxy stands between the client
and the service only; deliveries go straight to the receiver.

At the end the demo counts what happened from the service's database and
the payment provider's ledger, never from the client's own bookkeeping;
waits (a minute at most) until every event of the feed has been handled,
and prints ``webhooks: E events in the feed, D deliveries received, E
handled, 0 handled twice``; and ends with its verdict: ``demo: N orders, N
charges, R retries, 0 duplicates``.
"""
