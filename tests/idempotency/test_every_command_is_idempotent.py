"""Every state-changing endpoint under /v1/ is an idempotent command.

The rule is in docs/SPECIFICATION.md, section 3. An endpoint is a command
because its handler carries ``@idempotent_command``. Forget the decorator
and nothing fails: the endpoint still answers, but executes again on every
retry of one key. It stops being idempotent silently, and the tests of the
idempotency rules (test_rules.py and its neighbours) would not notice, as
they exercise the commands that do carry it. So this test walks the whole
URL configuration and reports every handler of POST, PUT, PATCH or DELETE
under /v1/ that is not a command, however the view is written: an APIView
method, a ViewSet action (routed by a router or by ``.as_view({...})``,
``@action`` included), an ``@api_view`` function, or a plain Django view,
which bypasses DRF and so can never be one. The tests after the main one
prove the checker catches each of these ways of forgetting, so that it
cannot pass by looking away.
"""

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import (
    URLPattern,
    URLResolver,
    get_resolver,
    include,
    path,
    re_path,
)
from django.urls.resolvers import RegexPattern
from django.views import View
from rest_framework import viewsets
from rest_framework.decorators import action, api_view
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.routers import SimpleRouter
from rest_framework.views import APIView

from idempotency.commands import idempotent_command
from orders.models import Order

STATE_CHANGING = ("post", "put", "patch", "delete")
# The commands the service has: the checker must find them, or it proves nothing.
REAL_COMMANDS = {
    "POST v1/orders (OrderCollection.post)",
    "PUT v1/orders/<str:order_id> (OrderDetail.put)",
    "POST v1/orders/<id:order_id>/cancel (OrderCancel.post)",
    "POST v1/payments (PaymentCollection.post)",
    "POST v1/webhook-endpoints (WebhookEndpointCollection.post)",
    "DELETE v1/webhook-endpoints/<id:endpoint_id> (WebhookEndpointDetail.delete)",
}

Patterns = Sequence[URLPattern | URLResolver]


@dataclass(frozen=True)
class Endpoint:
    """One state-changing HTTP method of one route, and the handler it runs."""

    method: str
    route: str
    handler: str
    is_command: bool

    def __str__(self) -> str:
        return f"{self.method} {self.route} ({self.handler})"


def commands_without_the_protocol(patterns: Patterns) -> list[str]:
    """Each state-changing endpoint under v1/ whose handler is not an idempotent command."""
    return [
        str(endpoint) for endpoint in state_changing_endpoints(patterns) if not endpoint.is_command
    ]


def state_changing_endpoints(patterns: Patterns, prefix: str = "") -> Iterator[Endpoint]:
    """Every (method, route) under v1/ that accepts POST, PUT, PATCH or DELETE, includes walked."""
    for entry in patterns:
        route = prefix + _readable(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from state_changing_endpoints(entry.url_patterns, route)
        elif route.startswith("v1/"):
            yield from _endpoints_of(route, entry.callback)


def _endpoints_of(route: str, view: Callable[..., Any]) -> Iterator[Endpoint]:
    drf_class = getattr(view, "cls", None)
    if isinstance(drf_class, type) and issubclass(drf_class, APIView):
        # A ViewSet's view maps each method to an action (``create``,
        # ``destroy``, an ``@action``…); an APIView's, including the class
        # ``@api_view`` generates, runs the method of the same name. For the
        # latter the handler is DRF's wrapper, which never carries the
        # marker: the decorator cannot sit beneath ``@api_view`` either, as
        # that wrapper calls the function without the view it needs. So an
        # ``@api_view`` function is reported until it is an APIView method.
        actions: dict[str, str] = getattr(view, "actions", None) or {}
        for method in STATE_CHANGING:
            name = actions.get(method, method)
            if method in drf_class.http_method_names and (
                method in actions or hasattr(drf_class, method)
            ):
                handler = getattr(drf_class, name, None)
                yield Endpoint(
                    method.upper(),
                    route,
                    f"{drf_class.__name__}.{name}",
                    is_command=getattr(handler, "idempotent_command", False) is True,
                )
        return
    # Plain Django: no DRF request, no finalize_response, so no command
    # whatever the method carries.
    django_class = getattr(view, "view_class", None)
    if isinstance(django_class, type) and issubclass(django_class, View):
        for method in STATE_CHANGING:
            if method in django_class.http_method_names and hasattr(django_class, method):
                yield Endpoint(
                    method.upper(), route, f"{django_class.__name__}.{method}", is_command=False
                )
        return
    # A function view declares no methods that can be checked from outside
    # (require_POST keeps its list in a closure): it is taken to accept all.
    for method in STATE_CHANGING:
        yield Endpoint(method.upper(), route, view.__qualname__, is_command=False)


# A regex group naming a path parameter, without nested groups: shown as
# ``<name>``, as a path() route shows it, so that reports read alike.
_NAMED_GROUP = re.compile(r"\(\?P<(\w+)>[^()]*\)")


def _readable(pattern: object) -> str:
    """A route as people read it: re_path()'s anchors dropped, so that prefixes join."""
    text = str(pattern)
    if isinstance(pattern, RegexPattern):
        text = _NAMED_GROUP.sub(r"<\1>", text.removeprefix("^").removesuffix("$"))
    return text


def test_every_state_changing_endpoint_under_v1_is_an_idempotent_command() -> None:
    patterns = get_resolver().url_patterns

    found = {str(endpoint) for endpoint in state_changing_endpoints(patterns)}

    # Found, or the check below would pass by finding nothing.
    assert found >= REAL_COMMANDS
    assert commands_without_the_protocol(patterns) == [], (
        "Decorate each with idempotent_command; a plain Django view or an"
        " @api_view function cannot be a command: write it as an APIView method."
    )


# --- The ways of forgetting, each caught -------------------------------------


class WidgetViewSet(viewsets.ModelViewSet[Order]):
    """create, update, partial_update and destroy as ModelViewSet has them: undecorated."""

    queryset = Order.objects.all()  # routing only: nothing is queried

    @action(detail=True, methods=["post"])
    def archive(self, request: Request, pk: str | None = None) -> Response:
        return Response()


class DecoratedViewSet(viewsets.ViewSet):
    @idempotent_command
    def create(self, request: Request) -> Response:
        return Response()

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        return Response()

    @action(detail=True, methods=["post"])
    @idempotent_command
    def archive(self, request: Request, pk: str | None = None) -> Response:
        return Response()


class BareViewSet(viewsets.ViewSet):
    def create(self, request: Request) -> Response:
        return Response()


class BareApiView(APIView):
    def get(self, request: Request, **kwargs: str) -> Response:
        return Response()

    def post(self, request: Request, **kwargs: str) -> Response:
        return Response()


class DecoratedApiView(APIView):
    @idempotent_command
    def put(self, request: Request) -> Response:
        return Response()

    # A read: not a command, and not reported.
    def get(self, request: Request) -> Response:
        return Response()


@api_view(["GET", "POST"])
def place_widget(request: Request) -> Response:
    return Response()


# The decorator on what it does not fit, as the checker must still report it.
@api_view(["POST"])  # type: ignore[type-var]
@idempotent_command  # type: ignore[arg-type]
def place_widget_marked(request: Request) -> Response:
    return Response()


def legacy_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse()


class LegacyFormView(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse()

    def post(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse()


class LegacyMarkedView(View):
    @idempotent_command  # type: ignore[type-var, arg-type]
    def delete(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse()


def under_v1(*patterns: URLPattern | URLResolver) -> list[URLResolver]:
    return [path("v1/", include(list(patterns)))]


def test_a_viewsets_undecorated_actions_routed_by_a_router_are_reported() -> None:
    router = SimpleRouter(trailing_slash=False)
    router.register("widgets", WidgetViewSet)

    assert commands_without_the_protocol(under_v1(*router.urls)) == [
        "POST v1/widgets (WidgetViewSet.create)",
        "PUT v1/widgets/<pk> (WidgetViewSet.update)",
        "PATCH v1/widgets/<pk> (WidgetViewSet.partial_update)",
        "DELETE v1/widgets/<pk> (WidgetViewSet.destroy)",
        "POST v1/widgets/<pk>/archive (WidgetViewSet.archive)",
    ]


def test_a_viewset_routed_with_as_view_is_reported_by_its_action() -> None:
    patterns = under_v1(
        path("gizmos", BareViewSet.as_view({"post": "create"})),
    )

    assert commands_without_the_protocol(patterns) == ["POST v1/gizmos (BareViewSet.create)"]


def test_a_viewsets_decorated_actions_are_not_reported() -> None:
    router = SimpleRouter(trailing_slash=False)
    router.register("gadgets", DecoratedViewSet, basename="gadget")
    patterns = under_v1(*router.urls)

    assert {str(endpoint) for endpoint in state_changing_endpoints(patterns)} == {
        "POST v1/gadgets (DecoratedViewSet.create)",
        "POST v1/gadgets/<pk>/archive (DecoratedViewSet.archive)",
    }
    assert commands_without_the_protocol(patterns) == []


def test_an_undecorated_apiview_method_is_reported_and_its_reads_are_not() -> None:
    patterns = under_v1(path("widgets/<str:widget_id>/ship", BareApiView.as_view()))

    assert commands_without_the_protocol(patterns) == [
        "POST v1/widgets/<str:widget_id>/ship (BareApiView.post)"
    ]


def test_a_decorated_apiview_method_is_not_reported() -> None:
    patterns = under_v1(path("widgets", DecoratedApiView.as_view()))

    assert [str(endpoint) for endpoint in state_changing_endpoints(patterns)] == [
        "PUT v1/widgets (DecoratedApiView.put)"
    ]
    assert commands_without_the_protocol(patterns) == []


def test_an_api_view_function_accepting_a_state_changing_method_is_reported() -> None:
    patterns = under_v1(path("widgets", place_widget))

    assert commands_without_the_protocol(patterns) == ["POST v1/widgets (place_widget.post)"]


def test_an_api_view_function_is_reported_even_with_the_decorator_beneath_it() -> None:
    # DRF's handler calls the function without the view, so the decorator
    # there would fail at the first request; the handler is what runs.
    patterns = under_v1(path("widgets", place_widget_marked))

    assert commands_without_the_protocol(patterns) == ["POST v1/widgets (place_widget_marked.post)"]


def test_a_plain_django_function_view_is_reported_for_every_state_changing_method() -> None:
    patterns = under_v1(path("legacy", legacy_view))

    assert commands_without_the_protocol(patterns) == [
        "POST v1/legacy (legacy_view)",
        "PUT v1/legacy (legacy_view)",
        "PATCH v1/legacy (legacy_view)",
        "DELETE v1/legacy (legacy_view)",
    ]


def test_a_plain_django_class_based_view_is_reported_even_when_its_method_is_decorated() -> None:
    patterns = under_v1(
        path("legacy-form", LegacyFormView.as_view()),
        path("legacy-marked", LegacyMarkedView.as_view()),
    )

    assert commands_without_the_protocol(patterns) == [
        "POST v1/legacy-form (LegacyFormView.post)",
        "DELETE v1/legacy-marked (LegacyMarkedView.delete)",
    ]


def test_a_view_in_nested_includes_and_re_path_patterns_is_reported() -> None:
    patterns = [
        re_path(
            r"^v1/",
            include(
                [
                    path("shop/", include([path("carts", BareApiView.as_view())])),
                    re_path(r"^widgets/(?P<widget_id>\w+)/retire$", BareApiView.as_view()),
                ]
            ),
        )
    ]

    assert commands_without_the_protocol(patterns) == [
        "POST v1/shop/carts (BareApiView.post)",
        "POST v1/widgets/<widget_id>/retire (BareApiView.post)",
    ]


def test_a_state_changing_view_outside_v1_is_not_reported() -> None:
    patterns: Patterns = [
        path("internal/", include([path("widgets", BareApiView.as_view())])),
        path("legacy", legacy_view),
    ]

    assert commands_without_the_protocol(patterns) == []
