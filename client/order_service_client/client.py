"""The blocking client: :class:`OrderServiceClient`.

The rules it follows, and why:

1. **One key per intended action, the same on every retry.** Each command
   gets a new random key (a UUID4) unless the caller passes ``key``, and
   every retry of that call sends the same key and the same body bytes.
   The service executes a key once and replays its answer to every copy,
   so a retry after a lost answer is a question ("what became of it?"),
   never a second order or a second charge.
2. **Intents survive the process, for the service's retention.** With
   ``intent="pay:invoice-7"`` the key comes from the key store (in memory
   unless one is given; created and committed there before the first
   attempt leaves). The store keeps it for the service's retention, 24
   hours by default from the key's first use, whatever the answer: a
   process that crashes mid-call, or after the answer and before it
   recorded the outcome, or that simply runs the same code again, resumes
   the same action under the same key and gets the first answer replayed
   (:attr:`CommandResult.replayed`), never a second order or charge.
   :mod:`order_service_client.keys` says how the retention is counted and
   what a new decision under an old intent needs.
3. **Retry only what may change, never what may not.** No answer, a 5xx
   that is not a replayed stored outcome, ``409 IdempotencyKeyInProgress``
   and ``429`` are retried; every other answer is final, and a 4xx raises
   its typed error at once (:mod:`order_service_client.retry`). A first
   ``500`` is retried too: the service stores a ``500`` as the command's
   answer, so the retry replays it marked ``Idempotent-Replayed`` (final
   then) and executes nothing, while a ``500`` without the mark may be a
   proxy's, which says nothing of the command. Every call this client
   makes may be retried: commands carry their key, reads are ``GET``.
4. **Wait as told, and not forever.** ``Retry-After`` is honoured;
   otherwise capped exponential backoff with full jitter; and no attempt
   starts after the policy's deadline (or beyond ``max_attempts``, if
   set), so a call ends with an answer or :class:`RetriesExhausted`
   within a bounded time. The default bound is time, 60 s, twice the
   goal of a failover of the service's database: a count would be spent
   by fast failures (a refused connection) before the new primary serves.
   No retry under a key starts past the service's retention counted from
   the key's first use (its intent's, or this call's), when the service
   may have forgotten it and would run the command again. Each attempt's
   timeout is cut to end by the deadline too.
5. **Errors are types.** Every problem+json answer becomes the exception
   for its code (:mod:`order_service_client.errors`), carrying ``traceId``
   for the operators.
6. **Change what you read, or nothing.** ``get_order_versioned`` (and its
   payment and operation twins) answers the body with its ``ETag``
   (:class:`Versioned`); given to ``cancel`` or ``put_order`` as
   ``if_match``, it makes the command run only while the order is still
   that version, and ``412 PreconditionFailed`` otherwise. ``If-Match`` is
   part of the call like the key and the body, the same on every retry.
   The ``412`` is the command's stored outcome: read again, decide again,
   and send the new decision under a new key, or a new intent such as
   ``f"cancel:{order_id}:{etag}"`` (the service fingerprints method, path
   and body, not ``If-Match``, so the old key with a new tag would only
   replay the ``412``). ``get_order`` and the other plain reads answer the
   body alone.

``sleep``, ``clock`` and ``rng`` are parameters so that tests drive the
retry loop without waiting and with known jitter.
"""

import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self

import httpx

from order_service_client._core import (
    CommandResult,
    Versioned,
    _Call,
    _ClientCore,
    _feed_path,
    _operation_id,
    _path,
)
from order_service_client.keys import KeyStore
from order_service_client.policy import POLICY_PATH, ServicePolicy
from order_service_client.retry import RetryEvent, RetryPolicy

__all__ = ["CommandResult", "OrderServiceClient", "Versioned"]


class OrderServiceClient(_ClientCore):
    """A retrying client of the order service's ``/v1`` API.

    ::

        with OrderServiceClient("http://127.0.0.1:8000", token) as client:
            created = client.create_order(
                customer_id="c-1", currency="RUB", items=[{"sku": "ABC", "qty": 2}]
            )
            order = created.body["order"]
            accepted = client.pay(
                order_id=order["id"], amount=order["totalAmount"], currency="RUB",
                payment_method="pm_card_ok", intent=f"pay:{order['id']}",
            )
            operation = client.wait(accepted)   # {"status": "succeeded", "resultId": "pay_…", …}

    :param base_url: the service's address, such as ``http://127.0.0.1:8000``;
        paths and the service's path-absolute links are resolved against it.
    :param token: the API token (``Authorization: Bearer``).
    :param retry: when and how long to retry; :class:`RetryPolicy` defaults.
    :param key_store: where intents keep their keys; in memory by default
        (:class:`MemoryKeyStore`), on disk with :class:`SQLiteKeyStore`.
    :param timeout: seconds each attempt may take to connect, send and read.
    :param transport: an httpx transport instead of the network (tests).
    :param on_retry: called before each retry's sleep, with what and why.
    :param sleep: how to wait between attempts.
    :param clock: monotonic seconds, for the deadlines.
    :param rng: the jitter's source of randomness.
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retry: RetryPolicy | None = None,
        key_store: KeyStore | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            retry=retry,
            key_store=key_store,
            timeout=timeout,
            on_retry=on_retry,
            clock=clock,
            rng=rng,
        )
        self._sleep = sleep
        self._http = httpx.Client(transport=transport, **self._http_options())

    def close(self) -> None:
        """Close the connections. The client cannot be used afterwards."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # Commands.

    def create_order(
        self,
        *,
        customer_id: str,
        currency: str,
        items: Sequence[Mapping[str, object]],
        key: str | None = None,
        intent: str | None = None,
    ) -> CommandResult:
        """``POST /v1/orders``: an order of ``items`` (each ``{"sku", "qty"}``).

        :param key: the ``Idempotency-Key``; a new one when ``None``.
        :param intent: name of the action, whose key the key store keeps
            (instead of ``key``).
        :returns: ``201`` with ``{"status", "orderId", "order", "links"}``.
        :raises Unprocessable: ``UnknownSku``, ``CurrencyMismatch``.
        :raises ValidationFailed: the body is not valid.
        :raises IdempotencyKeyConflict: the key was used for another request.
        :raises RetriesExhausted: no final answer; the outcome is unknown.
        """
        return self._run(
            self._create_order_call(
                customer_id=customer_id, currency=currency, items=items, key=key, intent=intent
            )
        )

    def put_order(
        self,
        order_id: str,
        *,
        customer_id: str,
        currency: str,
        items: Sequence[Mapping[str, object]],
        key: str | None = None,
        intent: str | None = None,
        if_match: str | None = None,
    ) -> CommandResult:
        """``PUT /v1/orders/{id}``: :meth:`create_order`, under an id the caller chose.

        The id names the order, as the key names the request: if it holds
        an equivalent order already (placed under any key), the answer is
        that order and nothing is placed. The id is sent as it is given
        (quoted as one path segment); the service checks it.

        :param order_id: ``ord_`` and 1 to 64 of ``A-Z a-z 0-9 _ -``.
        :param key: the ``Idempotency-Key``; a new one when ``None``.
        :param intent: name of the action, whose key the key store keeps
            (instead of ``key``).
        :param if_match: an ``ETag`` of the order (:meth:`get_order_versioned`),
            or ``"*"``: place nothing, only answer, unless the id holds the
            order at that version (``*``: at all). Sent on every attempt.
        :returns: ``201`` with ``{"status", "orderId", "order", "links"}``
            when it placed the order; ``200`` with the same shape when the
            id held an equivalent one (:attr:`CommandResult.status` tells).
        :raises OrderAlreadyExists: the id holds a different order (``.mismatch``).
        :raises PreconditionFailed: ``if_match`` names no current version of the order.
        :raises Unprocessable: ``UnknownSku``, ``CurrencyMismatch``.
        :raises ValidationFailed: the body, or the id, is not valid.
        :raises IdempotencyKeyConflict: the key was used for another request.
        :raises RetriesExhausted: no final answer; the outcome is unknown.
        """
        return self._run(
            self._put_order_call(
                order_id,
                customer_id=customer_id,
                currency=currency,
                items=items,
                key=key,
                intent=intent,
                if_match=if_match,
            )
        )

    def pay(
        self,
        *,
        order_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        key: str | None = None,
        intent: str | None = None,
    ) -> CommandResult:
        """``POST /v1/payments``: charge the order's total (``amount`` in minor units).

        :returns: ``202`` with ``{"status", "paymentId", "operationId", "links"}``;
            :meth:`wait` for the operation. A replay's ``status`` is the
            operation's current one.
        :raises Unprocessable: ``OrderNotFound``, ``AmountMismatch``, ``CurrencyMismatch``.
        :raises Conflict: ``OrderAlreadyPaid``, ``OrderStateConflict``, ``PaymentInProgress``.
        :raises ValidationFailed: the body is not valid (an unknown ``payment_method``).
        :raises IdempotencyKeyConflict: the key was used for another request.
        :raises RetriesExhausted: no final answer; the outcome is unknown.
        """
        return self._run(
            self._pay_call(
                order_id=order_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                key=key,
                intent=intent,
            )
        )

    def cancel(
        self,
        order_id: str,
        *,
        reason: str = "",
        key: str | None = None,
        intent: str | None = None,
        if_match: str | None = None,
    ) -> CommandResult:
        """``POST /v1/orders/{id}/cancel``.

        :param if_match: an ``ETag`` of the order (:meth:`get_order_versioned`),
            or ``"*"``: cancel only the order as it was read. Sent on every attempt.
        :returns: ``200`` with the cancelled order (pending, or cancelled
            already), or ``202`` with a refund operation to :meth:`wait`
            for (paid).
        :raises NotFound: no such order.
        :raises PreconditionFailed: ``if_match`` names no current version of the order.
        :raises Conflict: ``OrderStateConflict`` (a payment is in progress).
        :raises IdempotencyKeyConflict: the key was used for another request.
        :raises RetriesExhausted: no final answer; the outcome is unknown.
        """
        return self._run(
            self._cancel_call(order_id, reason=reason, key=key, intent=intent, if_match=if_match)
        )

    # Reads.

    def get_order(self, order_id: str) -> dict[str, Any]:
        """``GET /v1/orders/{id}``: the order.

        :raises NotFound: no such order, or another tenant's.
        """
        return self.get_order_versioned(order_id).body

    def get_order_versioned(self, order_id: str) -> Versioned:
        """``GET /v1/orders/{id}``: the order and its ``ETag``, for ``if_match``.

        ::

            current = client.get_order_versioned("ord_1")
            if current.body["status"] == "pending" and current.etag is not None:
                client.cancel("ord_1", if_match=current.etag)  # or PreconditionFailed

        :raises NotFound: no such order, or another tenant's.
        """
        return self._get_versioned(_path("/v1/orders/{}", order_id))

    def get_payment(self, payment_id: str) -> dict[str, Any]:
        """``GET /v1/payments/{id}``: the payment.

        :raises NotFound: no such payment, or another tenant's.
        """
        return self.get_payment_versioned(payment_id).body

    def get_payment_versioned(self, payment_id: str) -> Versioned:
        """``GET /v1/payments/{id}``: the payment and its ``ETag``.

        :raises NotFound: no such payment, or another tenant's.
        """
        return self._get_versioned(_path("/v1/payments/{}", payment_id))

    def get_operation(self, operation_id: str) -> dict[str, Any]:
        """``GET /v1/operations/{id}``: the operation.

        :raises NotFound: no such operation, or another tenant's.
        """
        return self.get_operation_versioned(operation_id).body

    def get_operation_versioned(self, operation_id: str) -> Versioned:
        """``GET /v1/operations/{id}``: the operation and its ``ETag``.

        :raises NotFound: no such operation, or another tenant's.
        """
        return self._get_versioned(_path("/v1/operations/{}", operation_id))

    def list_orders(self, *, page_size: int = 50) -> Iterator[dict[str, Any]]:
        """Every order of the tenant, newest first, fetched ``page_size`` (1 to 200) at a time.

        Follows each page's ``next`` link until there is none; a page is
        fetched only when the one before it has been consumed.
        """
        path: str | None = f"/v1/orders?pageSize={page_size}"
        while path is not None:
            page = self._get(path)
            yield from page["results"]
            path = page.get("next")

    def list_events(
        self, *, after: str | None = None, type: str | None = None, page_size: int = 50
    ) -> Iterator[dict[str, Any]]:
        """The tenant's events, oldest first, from the feed's start or ``after`` an event.

        ``GET /v1/events``, ``page_size`` (1 to 200) at a time, each page
        fetched once the one before it has been consumed, until the feed's
        end: the iterator then stops, and the consumer asks again later
        ``after`` the last event it handled. Each page after the first is
        asked ``after`` the last event read rather than by the ``next``
        link: each request is then the one a restart from the consumer's
        checkpoint would send.

        ::

            checkpoint = SQLiteFeedCheckpoint("consumer.sqlite3")
            for event in client.list_events(after=checkpoint.position()):
                # The effect and the checkpoint: one commit.
                checkpoint.handle(event, lambda db: apply(db, event))

        :param after: an event id: start after it. ``None``: from the start.
        :param type: only events of this type (``order.created`` …).
        :raises FeedCheckpointLost: the feed holds no event ``after`` (or the
            last one read, purged meanwhile): events may be gone unread.
        :raises ValidationFailed: ``type`` is not an event type.
        """
        while True:
            path = _feed_path(after=after, type=type, page_size=page_size)
            response, _ = self._send(_Call("GET", path))
            events, more = self._feed_page(response, after=after)
            for event in events:
                yield event
                after = event["id"]
            if not more:
                return

    def lookup_key(self, key: str) -> dict[str, Any] | None:
        """``GET /v1/idempotency-keys/{key}``: what became of one of our keys; ``None``: not known.

        The answer says what the key was used for, the status it earned and
        what it made, never the request's values (docs/SPECIFICATION.md §3
        rule 11). It tells the outcome only within the key's retention
        (``IDEMPOTENCY_KEY_TTL``, 24 hours by default, from the key's first
        request). ``None`` is the service's ``404``, which it answers alike
        for a key it never executed, one whose first request is still
        running, another principal's, and an expired one. Within the
        retention it means "not executed, or still running": retry under
        the same key, which executes it once. After it, it means only "not
        known", never "did not run", and a retry under the key executes
        the command again. A command that may be retried that late is
        better placed under an id of your own (``put_order``), which
        answers for the order as long as it exists; otherwise reconcile it
        against your own records or the resources before sending it again.
        """
        call = _Call("GET", _path("/v1/idempotency-keys/{}", key))
        response, _ = self._send(call)
        if response.status_code == 404:
            return None
        return self._read(response)

    def wait(
        self, operation: str | Mapping[str, Any] | CommandResult, *, timeout: float = 60.0
    ) -> dict[str, Any]:
        """Poll an operation until it is final; the operation (``status`` succeeded or failed).

        :param operation: the operation's id, the operation, or the ``202``
            answer (a :class:`CommandResult` or its body) naming it.
        :param timeout: seconds to wait at most. Between polls the client
            waits for the ``Retry-After`` the service sends (it grows with
            the operation's age, up to 30 s); one that reaches past the
            timeout is cut so that a last poll comes a second before it.
        :raises OperationTimeout: still processing when no poll could be
            made before ``timeout`` ran out.
        :raises RetriesExhausted: a poll got no answer within the retry
            policy (whose deadline is cut to ``timeout``).
        :raises NotFound: no such operation.
        """
        operation_id = _operation_id(operation)
        deadline = self._clock() + timeout
        call = _Call("GET", _path("/v1/operations/{}", operation_id))
        while True:
            response, _ = self._send(call, until=deadline)
            body = self._read(response)
            delay = self._poll_delay(
                operation_id, body, response, deadline=deadline, timeout=timeout
            )
            if delay is None:
                return body
            self._sleep(delay)

    # The loop.

    def policy(self) -> ServicePolicy | None:
        """The service's idempotency policy, read again once its ``max-age`` is up.

        ``None`` when the service publishes none or could not be asked: the
        client then counts with its key store's retention. Read once, not
        retried: a command's own retries ride out an outage.
        """
        if self._policy_due():
            try:
                response = self._http.request("GET", POLICY_PATH, timeout=self._timeout)
            except httpx.TransportError:
                response = None
            self._take_policy(response)
        return self._policy

    def _send(self, call: _Call, *, until: float | None = None) -> tuple[httpx.Response, int]:
        """The final answer to ``call`` and the attempts it took; retried as the policy says.

        :raises RetriesExhausted: the policy stopped before a final answer.
        """
        attempts = self._attempts(call, until)
        while True:
            timeout = attempts.start()
            try:
                response = self._http.request(
                    call.method,
                    call.path,
                    content=call.content,
                    headers=call.headers,
                    timeout=timeout,
                )
            except httpx.TransportError as error:
                delay = attempts.after_error(error)
            else:
                retry_in = attempts.after_response(response)
                if retry_in is None:
                    return response, attempts.count
                delay = retry_in
            self._sleep(delay)

    def _run(self, call: _Call) -> CommandResult:
        if self._policy_due():
            self.policy()
        response, attempts = self._send(call)
        return self._command_result(call, response, attempts)

    def _get(self, path: str) -> dict[str, Any]:
        response, _ = self._send(_Call("GET", path))
        return self._read(response)

    def _get_versioned(self, path: str) -> Versioned:
        response, _ = self._send(_Call("GET", path))
        return self._versioned(response)
