"""The asyncio twin of :class:`~order_service_client.OrderServiceClient`.

Same calls, same rules, same :class:`RetryPolicy`, keys, results and
errors (all of it in :mod:`order_service_client._core`); only sending and
sleeping are awaited. Each method's documentation is the blocking one's.

Key stores are called directly: :class:`MemoryKeyStore` never blocks, and
:class:`SQLiteKeyStore` blocks for one small local transaction per command
(longer only while another process holds its write lock).
"""

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
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

__all__ = ["AsyncOrderServiceClient"]


class AsyncOrderServiceClient(_ClientCore):
    """``OrderServiceClient`` for asyncio: ``async with``, and ``await`` every call.

    ``transport`` is an ``httpx.AsyncBaseTransport``; ``sleep`` a coroutine
    function (``asyncio.sleep`` by default).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        retry: RetryPolicy | None = None,
        key_store: KeyStore | None = None,
        timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            retry=retry,
            key_store=key_store,
            timeout=timeout,
            on_retry=on_retry,
            # The event loop's clock is monotonic, and the one a fake loop fakes.
            clock=clock or (lambda: asyncio.get_running_loop().time()),
            rng=rng,
        )
        self._sleep = sleep
        self._http = httpx.AsyncClient(transport=transport, **self._http_options())

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def create_order(
        self,
        *,
        customer_id: str,
        currency: str,
        items: Sequence[Mapping[str, object]],
        key: str | None = None,
        intent: str | None = None,
    ) -> CommandResult:
        return await self._run(
            self._create_order_call(
                customer_id=customer_id, currency=currency, items=items, key=key, intent=intent
            )
        )

    async def put_order(
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
        return await self._run(
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

    async def pay(
        self,
        *,
        order_id: str,
        amount: int,
        currency: str,
        payment_method: str,
        key: str | None = None,
        intent: str | None = None,
    ) -> CommandResult:
        return await self._run(
            self._pay_call(
                order_id=order_id,
                amount=amount,
                currency=currency,
                payment_method=payment_method,
                key=key,
                intent=intent,
            )
        )

    async def cancel(
        self,
        order_id: str,
        *,
        reason: str = "",
        key: str | None = None,
        intent: str | None = None,
        if_match: str | None = None,
    ) -> CommandResult:
        return await self._run(
            self._cancel_call(order_id, reason=reason, key=key, intent=intent, if_match=if_match)
        )

    async def get_order(self, order_id: str) -> dict[str, Any]:
        return (await self.get_order_versioned(order_id)).body

    async def get_order_versioned(self, order_id: str) -> Versioned:
        return await self._get_versioned(_path("/v1/orders/{}", order_id))

    async def get_payment(self, payment_id: str) -> dict[str, Any]:
        return (await self.get_payment_versioned(payment_id)).body

    async def get_payment_versioned(self, payment_id: str) -> Versioned:
        return await self._get_versioned(_path("/v1/payments/{}", payment_id))

    async def get_operation(self, operation_id: str) -> dict[str, Any]:
        return (await self.get_operation_versioned(operation_id)).body

    async def get_operation_versioned(self, operation_id: str) -> Versioned:
        return await self._get_versioned(_path("/v1/operations/{}", operation_id))

    async def list_orders(self, *, page_size: int = 50) -> AsyncIterator[dict[str, Any]]:
        path: str | None = f"/v1/orders?pageSize={page_size}"
        while path is not None:
            page = await self._get(path)
            for order in page["results"]:
                yield order
            path = page.get("next")

    async def list_events(
        self, *, after: str | None = None, type: str | None = None, page_size: int = 50
    ) -> AsyncIterator[dict[str, Any]]:
        while True:
            path = _feed_path(after=after, type=type, page_size=page_size)
            response, _ = await self._send(_Call("GET", path))
            events, more = self._feed_page(response, after=after)
            for event in events:
                yield event
                after = event["id"]
            if not more:
                return

    async def lookup_key(self, key: str) -> dict[str, Any] | None:
        response, _ = await self._send(_Call("GET", _path("/v1/idempotency-keys/{}", key)))
        if response.status_code == 404:
            return None
        return self._read(response)

    async def wait(
        self, operation: str | Mapping[str, Any] | CommandResult, *, timeout: float = 60.0
    ) -> dict[str, Any]:
        operation_id = _operation_id(operation)
        deadline = self._clock() + timeout
        call = _Call("GET", _path("/v1/operations/{}", operation_id))
        while True:
            response, _ = await self._send(call, until=deadline)
            body = self._read(response)
            delay = self._poll_delay(
                operation_id, body, response, deadline=deadline, timeout=timeout
            )
            if delay is None:
                return body
            await self._sleep(delay)

    async def policy(self) -> ServicePolicy | None:
        """The service's idempotency policy, read again once its ``max-age`` is up.

        ``None`` when the service publishes none or could not be asked: the
        client then counts with its key store's retention. Read once, not
        retried: a command's own retries ride out an outage.
        """
        if self._policy_due():
            try:
                response = await self._http.request("GET", POLICY_PATH, timeout=self._timeout)
            except httpx.TransportError:
                response = None
            self._take_policy(response)
        return self._policy

    async def _send(self, call: _Call, *, until: float | None = None) -> tuple[httpx.Response, int]:
        attempts = self._attempts(call, until)
        while True:
            timeout = attempts.start()
            try:
                response = await self._http.request(
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
            await self._sleep(delay)

    async def _run(self, call: _Call) -> CommandResult:
        if self._policy_due():
            await self.policy()
        response, attempts = await self._send(call)
        return self._command_result(call, response, attempts)

    async def _get(self, path: str) -> dict[str, Any]:
        response, _ = await self._send(_Call("GET", path))
        return self._read(response)

    async def _get_versioned(self, path: str) -> Versioned:
        response, _ = await self._send(_Call("GET", path))
        return self._versioned(response)
