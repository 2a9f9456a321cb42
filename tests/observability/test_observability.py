"""Structured logs and Prometheus metrics."""

import json
import logging
from typing import Any

import pytest
from django.test import Client

from observability.logging import json_formatter
from tests.support.concurrency import FinishedOperation
from tests.support.http import Api, body_of, payment_body

pytestmark = pytest.mark.django_db(transaction=True)


def json_lines(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    formatter = json_formatter()
    lines = [json.loads(formatter.format(record)) for record in caplog.records]
    return [line for line in lines if line.get("event") == event]


def test_each_request_logs_one_json_line_with_its_trace_and_outcome(
    api: Api, order_body: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    api.post("/v1/orders", order_body, key="K", **{"X-Request-ID": "trace-1"})
    api.post("/v1/orders", order_body, key="K", **{"X-Request-ID": "trace-2"})

    first, second = json_lines(caplog, "request")
    assert first["trace_id"] == "trace-1"
    assert first["command"] == "POST /v1/orders"
    assert first["idempotency_outcome"] == "executed"
    assert first["principal"] == "acme/alice"
    assert first["status"] == 201
    assert first["duration_ms"] > 0
    assert second["trace_id"] == "trace-2"
    assert second["idempotency_outcome"] == "replayed"


def test_the_trace_of_a_request_reaches_the_task_it_publishes(
    api: Api,
    order_body: dict[str, Any],
    worker: None,
    finished_operation: FinishedOperation,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    order = body_of(api.post("/v1/orders", order_body, key="o"))["order"]

    accepted = api.post(
        "/v1/payments", payment_body(order), key="p", **{"X-Request-ID": "trace-pay"}
    )
    finished_operation(body_of(accepted)["operationId"])

    tasks = json_lines(caplog, "task")
    assert [t["trace_id"] for t in tasks] == ["trace-pay"]
    assert tasks[0]["task"] == "operations.tasks.run_operation"
    assert tasks[0]["state"] == "SUCCESS"


def test_metrics_count_idempotency_outcomes_commands_and_operations(
    api: Api, order_body: dict[str, Any], client: Client
) -> None:
    api.post("/v1/orders", order_body, key="K")
    api.post("/v1/orders", order_body, key="K")
    api.post("/v1/orders", {**order_body, "currency": "USD"}, key="K")
    api.post("/v1/orders", order_body)

    response = client.get("/metrics")

    assert response.status_code == 200
    text = response.content.decode()
    for outcome in ("executed", "replayed", "conflict", "missing_key"):
        assert (
            f'idempotency_outcomes_total{{command="POST /v1/orders",outcome="{outcome}"}}' in text
        )
    assert 'command_duration_seconds_bucket{command="POST /v1/orders"' in text
    assert 'operations{kind="payment.charge",status="processing"} 0.0' in text
    assert 'http_requests_total{method="POST",route="/v1/orders",status="201"}' in text
