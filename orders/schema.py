"""How the orders API is described in the OpenAPI schema.

One decorator per endpoint (the views wear them), with each endpoint's
answers, refusals and examples, and the links between the endpoints'
answers. The examples of refusals are rendered from the real errors
(api.openapi.problems.Refusal), and every command gets the idempotency layer's
part from :func:`idempotency.schema.command_schema`.
"""

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, OpenApiResponse

from api.openapi.hooks import Links, link, links_hook
from api.openapi.parameters import CURSOR, INVALID_LIST_QUERY, PAGE_SIZE, cursor_page, path_id
from api.openapi.problems import Refusal, not_found, validation_error
from api.openapi.reads import read_schema
from idempotency.schema import MismatchDetails, command_schema
from orders.errors import (
    AmountMismatch,
    CurrencyMismatch,
    OrderAlreadyExists,
    OrderAlreadyPaid,
    OrderStateConflict,
    PaymentInProgress,
    UnknownOrder,
    UnknownSku,
)
from orders.models import ORDER_ID_PATTERN
from orders.serializers import (
    CancelOrderInput,
    CreateOrderInput,
    CreatePaymentInput,
    OrderCommandOutput,
    OrderOutput,
    PaymentAcceptedOutput,
    PaymentOutput,
    RefundAcceptedOutput,
)

_ORDER_NOT_FOUND = not_found("order", "ord_3k9x0c2m5q8w1e4r7t6y0u2i9")
_ORDER_BODY = {"customerId": "cust-42", "items": [{"sku": "ABC", "qty": 2}], "currency": "RUB"}
_INVALID_ORDER = validation_error(
    CreateOrderInput,
    {"customerId": "cust-42", "items": [{"sku": "ABC", "qty": 1001}], "currency": "RUB"},
)
_PRICING_REFUSALS = [
    Refusal(
        UnknownSku("Unknown SKU: NOPE.", details={"unknownSkus": ["NOPE"]}),
        "an item's SKU is not in the catalog.",
    ),
    Refusal(
        CurrencyMismatch("Not priced in RUB: USD1.", details={"skus": ["USD1"], "currency": "RUB"}),
        "an item is priced in another currency than the order's.",
    ),
]


create_order = command_schema(
    operation_id="createOrder",
    summary="Place an order",
    description="Prices every line from the catalog; the order starts `pending`.",
    tag="orders",
    request=CreateOrderInput,
    responses={201: OpenApiResponse(OrderCommandOutput, "The order was placed.")},
    invalid=_INVALID_ORDER,
    refusals=_PRICING_REFUSALS,
    location=(201, "the new order"),
    examples=[OpenApiExample("Two of ABC", value=_ORDER_BODY, request_only=True)],
)


list_orders = read_schema(
    operation_id="listOrders",
    summary="List orders",
    description="The tenant's orders, newest first, cursor-paginated.",
    tag="orders",
    response=OpenApiResponse(cursor_page(OrderOutput, "OrderPage"), "A page of orders."),
    refusals=[INVALID_LIST_QUERY],
    parameters=[CURSOR, PAGE_SIZE],
)


get_order = read_schema(
    operation_id="getOrder",
    summary="Read an order",
    description="The order with its lines and the ids of its payments.",
    tag="orders",
    response=OpenApiResponse(OrderOutput, "The order."),
    refusals=[_ORDER_NOT_FOUND],
    parameters=[path_id("order_id", "ord")],
    conditional=True,
)


put_order = command_schema(
    operation_id="putOrder",
    summary="Place an order under an id you choose",
    description=(
        "The same body and rules as `POST /v1/orders`, under the id in the path: "
        "`ord_` followed by 1 to 64 of `A-Z a-z 0-9 _ -` (anything else is "
        "`400 ValidationError`, refused before the command starts and not stored). "
        "Ids are per tenant: another tenant's order under the same id is invisible "
        "and never in the way.\n\n"
        "The id names the intent, beside the key: `201` places the order; if the id "
        "holds an equivalent order already (the same `customerId`, `currency` and "
        "`items`, placed under any key), the answer is `200` with that order and "
        "nothing is placed; if it holds a different one, `409 OrderAlreadyExists` "
        "names the members that differ. So a client that lost the answer may send "
        "the `PUT` again even under a new key."
    ),
    tag="orders",
    request=CreateOrderInput,
    responses={
        201: OpenApiResponse(OrderCommandOutput, "The order was placed under the id."),
        200: OpenApiResponse(OrderCommandOutput, "The id holds this equivalent order already."),
    },
    invalid=_INVALID_ORDER,
    refusals=[
        Refusal(
            OrderAlreadyExists(details={"mismatch": ["/items/0/qty"]}),
            "the id holds a different order; `details.mismatch` lists the JSON Pointers "
            "into your body where it differs.",
            members={"details": MismatchDetails},
        ),
        *_PRICING_REFUSALS,
    ],
    location=(201, "the new order"),
    path_parameters=[
        OpenApiParameter(
            "order_id",
            location=OpenApiParameter.PATH,
            required=True,
            type={"type": "string", "pattern": f"^{ORDER_ID_PATTERN}$"},
            description="The id you choose: `ord_` followed by 1 to 64 of `A-Z a-z 0-9 _ -`.",
        )
    ],
    if_match=(
        "the order must exist and have this tag (`*`: exist at all), so a `PUT` with "
        "`If-Match` never places an order. Without it, the rules above apply."
    ),
    examples=[OpenApiExample("Two of ABC", value=_ORDER_BODY, request_only=True)],
)


cancel_order = command_schema(
    operation_id="cancelOrder",
    summary="Cancel an order",
    description=(
        "A pending order is cancelled at once (`200`). A paid order is refunded "
        "through the payment provider: `202` with the refund operation to poll; the "
        "order becomes `cancelled` when the refund succeeds. Cancelling a cancelled "
        "order answers `200` with it, whatever the key."
    ),
    tag="orders",
    request=CancelOrderInput,
    responses={
        200: OpenApiResponse(OrderCommandOutput, "The order is cancelled."),
        202: OpenApiResponse(RefundAcceptedOutput, "The order's refund is under way."),
    },
    invalid=validation_error(CancelOrderInput, {"reason": 42}),
    refusals=[
        _ORDER_NOT_FOUND,
        Refusal(
            OrderStateConflict("A payment of this order is processing; retry when it ends."),
            "a payment of the order is processing.",
        ),
    ],
    location=(202, "the refund operation"),
    path_parameters=[path_id("order_id", "ord")],
    if_match=(
        "the order is cancelled only if it still has this tag, so a cancel decided on "
        "what you read is refused once the order has changed (paid, say). Without it, "
        "the order is cancelled whatever its state allows."
    ),
    examples=[
        OpenApiExample("With a reason", value={"reason": "Ordered by mistake."}, request_only=True)
    ],
)


create_payment = command_schema(
    operation_id="createPayment",
    summary="Pay an order",
    description=(
        "Validated at once, then charged by a worker: `202` with the payment and the "
        "operation to poll. A retry with the same key answers the same ids with the "
        "operation's current `status`. The order can have one live payment: a second "
        "charge is refused whatever its key.\n\n"
        "To try it: place an order with `POST /v1/orders` first, and send its `orderId`, "
        "with its `totalAmount` as `amount` and its `currency`."
    ),
    tag="payments",
    request=CreatePaymentInput,
    responses={202: OpenApiResponse(PaymentAcceptedOutput, "The payment is processing.")},
    invalid=validation_error(
        CreatePaymentInput,
        {
            "orderId": "ord_3k9x0c2m5q8w1e4r7t6y0u2i9",
            "amount": "3980",
            "currency": "RUB",
            "paymentMethod": "pm_card_ok",
        },
    ),
    refusals=[
        Refusal(
            OrderAlreadyPaid(),
            "the order is paid already.",
        ),
        Refusal(
            OrderStateConflict("A cancelled order cannot be paid."),
            "the order is cancelled.",
        ),
        Refusal(PaymentInProgress(), "another payment of the order is processing."),
        Refusal(
            AmountMismatch(details={"totalAmount": 3980}),
            "the amount is not the order's `totalAmount`.",
        ),
        Refusal(
            CurrencyMismatch("The order is in RUB.", details={"currency": "RUB"}),
            "the currency is not the order's.",
        ),
        Refusal(
            UnknownOrder(details={"orderId": "ord_3k9x0c2m5q8w1e4r7t6y0u2i9"}),
            "the `orderId` names no order of your tenant.",
        ),
    ],
    location=(202, "the operation charging the payment"),
    examples=[
        OpenApiExample(
            "A card that pays",
            summary="A card that pays: replace orderId with the one POST /v1/orders answered",
            description=(
                "Pays the order of `createOrder`'s example (2 x ABC, 3980 RUB). Replace "
                "`orderId` with the `orderId` that `POST /v1/orders` answered: this one "
                "names no order (`422 OrderNotFound`). For another order, `amount` and "
                "`currency` are its `totalAmount` and `currency`."
            ),
            value={
                "orderId": "ord_REPLACE_WITH_YOUR_ORDER_ID",
                "amount": 3980,
                "currency": "RUB",
                "paymentMethod": "pm_card_ok",
            },
            request_only=True,
        )
    ],
)


get_payment = read_schema(
    operation_id="getPayment",
    summary="Read a payment",
    description=(
        "A payment that failed is `failed` with its `failureCode`: `card_declined` (the "
        "provider refused the card), `provider_unavailable` (the provider kept refusing "
        "every attempt and holds no charge for it) or `processing_error` (its attempts "
        "failed on our side, and the provider holds no charge). The order can be paid again."
    ),
    tag="payments",
    response=OpenApiResponse(PaymentOutput, "The payment."),
    refusals=[not_found("payment", "pay_8d2k4n6p0r1t3v5x7z9b2c4e6")],
    parameters=[path_id("payment_id", "pay")],
    conditional=True,
)


_ORDER_ID = {"orderId": "$response.body#/orderId"}
# Where an answer leads. Documented as OpenAPI links, and followed by the
# stateful tests of schemathesis (the fuzz tests). A requestBody holding
# runtime expressions is schemathesis' reading of the link object; to people
# it says which members to copy.
LINKS: Links = {
    ("createOrder", "201"): {
        "GetOrder": link("getOrder", "Read the order.", parameters=_ORDER_ID),
        "CancelOrder": link("cancelOrder", "Cancel the order.", parameters=_ORDER_ID),
        "PayOrder": link(
            "createPayment",
            "Pay the order: its id, total and currency.",
            requestBody={
                "orderId": "$response.body#/orderId",
                "amount": "$response.body#/order/totalAmount",
                "currency": "$response.body#/order/currency",
            },
        ),
    },
    ("cancelOrder", "200"): {
        "GetOrder": link("getOrder", "Read the cancelled order.", parameters=_ORDER_ID),
    },
    ("cancelOrder", "202"): {
        "GetOperation": link(
            "getOperation",
            "Poll the refund.",
            parameters={"operationId": "$response.body#/operationId"},
        ),
        "GetOrder": link("getOrder", "Read the order.", parameters=_ORDER_ID),
    },
    ("createPayment", "202"): {
        "GetPayment": link(
            "getPayment",
            "Read the payment.",
            parameters={"paymentId": "$response.body#/paymentId"},
        ),
        "GetOperation": link(
            "getOperation",
            "Poll the charge.",
            parameters={"operationId": "$response.body#/operationId"},
        ),
        "CancelOrder": link(
            "cancelOrder",
            "Cancel the order being paid.",
            parameters={"orderId": "$request.body#/orderId"},
        ),
    },
    ("getPayment", "200"): {
        "GetOrder": link(
            "getOrder", "Read the paid order.", parameters={"orderId": "$response.body#/orderId"}
        ),
    },
}


# The post-processing hook that puts LINKS on the schema (SPECTACULAR_SETTINGS).
add_links = links_hook(LINKS)
