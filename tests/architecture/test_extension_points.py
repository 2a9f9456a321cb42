"""Each event type and each operation kind an app registers is pinned by tests that name it.

Adding one is the domain's few calls into the platform (docs/ADDING_A_COMMAND.md,
"Adding an event" and "Adding an operation kind"). Recording an unregistered
type, or starting an unregistered kind, is refused where it happens
(events.registry.require, operations.registry.require); what no refusal can
see is a type or kind registered with no test of what it promises. So each
has its entry below, naming the tests that hold it, and this test fails
until a new one has its entry and every test named exists.

- An event type: recorded once, in its effect's transaction, with the
  resource as its read endpoint shows it.
- An operation kind: its handler runs to its end, runs again with what
  the kind promises of a repeat (one effect; for a webhook, the same bytes
  and id), and its attempts running out end it as its kind says.
"""

import importlib
from collections.abc import Callable

import pytest

from events import registry as event_registry
from operations import registry as operation_registry

EVENT_TYPES = {
    "order.created": [
        "tests.events.test_feed::test_placing_an_order_records_its_event_with_the_order_as_its_read_shows_it",
        "tests.events.test_feed::test_a_replayed_or_repeated_command_records_no_second_event",
    ],
    "order.cancelled": [
        "tests.events.test_feed::test_a_replayed_or_repeated_command_records_no_second_event",
        "tests.events.test_feed_from_the_worker::test_a_refund_records_payment_refunded_and_order_cancelled_once_each",
    ],
    "payment.succeeded": [
        "tests.events.test_feed_from_the_worker::test_a_charge_records_payment_succeeded_once_with_the_payment_as_read",
    ],
    "payment.failed": [
        "tests.events.test_feed_from_the_worker::test_a_declined_charge_records_payment_failed_once",
    ],
    "payment.refunded": [
        "tests.events.test_feed_from_the_worker::test_a_refund_records_payment_refunded_and_order_cancelled_once_each",
    ],
}

OPERATION_KINDS = {
    "payment.charge": [
        "tests.orders.test_payments::test_a_payment_is_charged_by_the_worker",
        "tests.orders.test_payments::test_a_redelivered_task_charges_once",
        "tests.orders.test_payment_endings::test_a_provider_that_refuses_every_call_fails_the_payment_and_charges_nothing",
    ],
    "order.refund": [
        "tests.orders.test_payments::test_cancelling_a_paid_order_refunds_it",
        "tests.events.test_feed_from_the_worker::test_a_refund_records_payment_refunded_and_order_cancelled_once_each",
        "tests.orders.test_payment_endings::test_a_refund_the_provider_keeps_refusing_fails_and_the_order_can_be_cancelled_again",
    ],
    "webhook.deliver": [
        "tests.events.test_deliveries::test_an_event_is_posted_signed_and_verifies_with_the_reference",
        "tests.events.test_deliveries::test_a_failed_attempt_is_retried_with_the_same_bytes_and_id",
        "tests.events.test_deliveries::test_an_endpoint_that_keeps_failing_ends_the_delivery_failed_after_its_budget",
    ],
}


def _missing(tests: dict[str, list[str]]) -> list[str]:
    missing = []
    for names in tests.values():
        for name in names:
            module, function = name.split("::")
            if not callable(getattr(importlib.import_module(module), function, None)):
                missing.append(name)
    return missing


@pytest.mark.parametrize(
    ("registered", "pinned"),
    [
        (event_registry.types, EVENT_TYPES),
        (operation_registry.kinds, OPERATION_KINDS),
    ],
    ids=["event types", "operation kinds"],
)
def test_every_registration_is_pinned_by_tests_that_exist(
    registered: Callable[[], list[str]], pinned: dict[str, list[str]]
) -> None:
    assert sorted(registered()) == sorted(pinned), "add its entry, naming its tests"
    assert _missing(pinned) == []


def test_recording_an_unregistered_type_or_starting_an_unregistered_kind_is_refused() -> None:
    with pytest.raises(LookupError, match=r"order\.shipped"):
        event_registry.require("order.shipped")
    with pytest.raises(LookupError, match=r"order\.ship\b"):
        operation_registry.require("order.ship")
    event_registry.require("order.created")
    operation_registry.require("payment.charge")
