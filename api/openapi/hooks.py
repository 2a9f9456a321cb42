"""drf-spectacular's post-processing hooks: what is said of the whole schema once it is made.

Path parameters named in camelCase, every member of a response body
required, and an app's links put on the responses they start from
(:func:`links_hook`).
"""

import re
from collections.abc import Callable, Mapping
from typing import Any

_SNAKE_PARAMETER = re.compile(r"\{([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\}")
# A parameter of a Django route: ``<id:order_id>``, ``<order_id>``.
_ROUTE_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def _camel(snake: str) -> str:
    first, *rest = snake.split("_")
    return first + "".join(part.capitalize() for part in rest)


def openapi_path(route: str) -> str:
    """``v1/orders/<id:order_id>`` → ``/v1/orders/{orderId}``: a route as the schema names it."""
    return "/" + _ROUTE_PARAMETER.sub(lambda m: "{" + _camel(m.group(1)) + "}", route.lstrip("/"))


def camel_case_path_parameters(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``/v1/orders/{order_id}`` → ``/v1/orders/{orderId}``, as the contract names it.

    The URLconf keeps Python's names for view arguments; the wire speaks camelCase.
    """
    paths = {}
    for path, item in result.get("paths", {}).items():
        renamed = {match: _camel(match) for match in _SNAKE_PARAMETER.findall(path)}
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter["name"] in renamed:
                    parameter["name"] = renamed[parameter["name"]]
        paths[_SNAKE_PARAMETER.sub(lambda m: "{" + _camel(m.group(1)) + "}", path)] = item
    result["paths"] = paths
    return result


def require_every_output_field(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Mark every member of a response body required.

    Output serializers render every field on every response, but
    drf-spectacular leaves out of ``required`` the model fields that have a
    default (``id``, ``status``), which would tell clients they may be absent.
    """
    for name, component in result.get("components", {}).get("schemas", {}).items():
        if name.endswith(("Output", "Page")) and "properties" in component:
            component["required"] = sorted(component["properties"])
    return result


Links = Mapping[tuple[str, str], Mapping[str, Mapping[str, Any]]]


def link(operation_id: str, description: str, **fields: Any) -> dict[str, Any]:
    """One OpenAPI link object: where an answer leads, and which members to copy."""
    return {"operationId": operation_id, "description": description, **fields}


def links_hook(table: Links) -> Callable[..., dict[str, Any]]:
    """A post-processing hook that puts ``table``'s links on the responses they start from.

    ``table`` maps (operationId, status) to the links of that response.
    """

    def add_links(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        for item in result.get("paths", {}).values():
            for operation in item.values():
                if not isinstance(operation, dict):
                    continue
                for status, response in operation.get("responses", {}).items():
                    if links := table.get((operation.get("operationId", ""), status)):
                        response["links"] = links
        return result

    return add_links
