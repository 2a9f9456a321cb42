"""docs/SPECIFICATION.md §5: the OpenAPI schema, and docs pages that work offline."""

import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import get_resolver
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.openapi import AutoSchema
from pytest_django import Settings
from rest_framework import serializers
from rest_framework.views import APIView

from api.openapi.strict import PYTHON_WHITESPACE, default_serializer_schema
from idempotency import schema as command_schemas
from idempotency.schema import NOT_STORED, STORED, STORED_ANSWERS, all_stored_answers

COMMAND_METHODS = ("post", "put", "patch", "delete")
# What a client reads before it has a token: the policy (§3 rule 15).
PUBLIC = {"/v1/idempotency-policy"}
# Each problem response has its component (api.openapi.problems.problem_responses).
PROBLEM_REF = re.compile(r"#/components/schemas/\w+Problem")
# Every URL a page names, whatever the attribute or script that names it.
ABSOLUTE_URL = re.compile(r"""(?:https?:)?//([^/\s"'<>)]+)""", re.IGNORECASE)


@pytest.fixture
def schema() -> dict[str, Any]:
    response = Client().get("/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    document: dict[str, Any] = json.loads(response.content)
    return document


def operations(schema: dict[str, Any], methods: tuple[str, ...]) -> list[tuple[str, str, Any]]:
    return [
        (path, method, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in methods
    ]


def test_the_schema_generates_without_warnings_and_validates(tmp_path: Path) -> None:
    # Warnings of earlier generations in this process would count too.
    GENERATOR_STATS.reset()

    call_command(
        "spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml")
    )

    assert (tmp_path / "schema.yaml").read_text().startswith("openapi: 3.")


def test_the_schema_is_served_without_authentication() -> None:
    anonymous = Client().get("/v1/schema/")
    stale_token = Client().get("/v1/schema/", headers={"Authorization": "Bearer osk_revoked"})

    assert anonymous.status_code == 200
    assert anonymous["Content-Type"].startswith("application/vnd.oai.openapi")
    assert b"/v1/orders" in anonymous.content
    assert stale_token.status_code == 200


def test_every_command_requires_an_idempotency_key(schema: dict[str, Any]) -> None:
    commands = operations(schema, COMMAND_METHODS)

    assert len(commands) == 6
    for path, method, operation in commands:
        keys = [
            p
            for p in operation["parameters"]
            if (p["in"], p["name"]) == ("header", "Idempotency-Key")
        ]
        assert len(keys) == 1, (method, path)
        assert keys[0]["required"] is True
        for policy in ("IDEMPOTENCY_KEY_TTL", "IdempotencyKeyConflict", "IdempotencyKeyInProgress"):
            assert policy in keys[0]["description"], (method, path, policy)


@pytest.mark.parametrize("status", ["400", "401", "409", "413", "415", "500"])
def test_every_command_documents_its_errors_as_problems(
    schema: dict[str, Any], status: str
) -> None:
    for path, method, operation in operations(schema, COMMAND_METHODS):
        content = operation["responses"][status]["content"]

        assert list(content) == ["application/problem+json"], (method, path, status)
        assert PROBLEM_REF.fullmatch(content["application/problem+json"]["schema"]["$ref"])
        assert len(content["application/problem+json"]["examples"]) == 1


def test_command_409_names_every_conflict_it_can_answer(schema: dict[str, Any]) -> None:
    conflict = schema["paths"]["/v1/payments"]["post"]["responses"]["409"]["description"]

    for code in (
        "IdempotencyKeyConflict",
        "IdempotencyKeyInProgress",
        "OrderAlreadyPaid",
        "OrderStateConflict",
        "PaymentInProgress",
    ):
        assert f"`{code}`" in conflict


def test_every_read_documents_401_and_404_or_for_a_list_400(schema: dict[str, Any]) -> None:
    reads = [read for read in operations(schema, ("get",)) if read[0] not in PUBLIC]

    assert len(reads) == 10
    for path, method, operation in reads:
        for status in ("401", "404" if "{" in path else "400"):
            content = operation["responses"][status]["content"]
            reference = content["application/problem+json"]["schema"]["$ref"]
            assert PROBLEM_REF.fullmatch(reference), (method, path, status)


def component(schema: dict[str, Any], reference: str) -> Any:
    return schema["components"]["schemas"][reference.removeprefix("#/components/schemas/")]


def test_each_problem_response_enumerates_the_codes_it_describes(schema: dict[str, Any]) -> None:
    for path, method, operation in operations(schema, ("get", *COMMAND_METHODS)):
        for status, response in operation["responses"].items():
            if "application/problem+json" not in response.get("content", {}):
                continue
            problem = response["content"]["application/problem+json"]["schema"]["$ref"]
            error = component(schema, problem)["properties"]["error"]
            codes = component(schema, error["allOf"][0]["$ref"])["enum"]

            described = re.findall(r"^- `(\w+)`", response["description"], re.MULTILINE)
            assert codes == described, (method, path, status)


def test_problem_details_are_typed_for_validation_and_key_conflicts(
    schema: dict[str, Any],
) -> None:
    responses = schema["paths"]["/v1/payments"]["post"]["responses"]
    invalid = responses["400"]["content"]["application/problem+json"]["schema"]["$ref"]
    conflict = responses["409"]["content"]["application/problem+json"]["schema"]["$ref"]

    field_errors = component(schema, invalid)["properties"]["details"]["allOf"][0]["$ref"]
    key_conflict = component(schema, conflict)["properties"]["details"]["$ref"]
    assert component(schema, field_errors)["additionalProperties"]["oneOf"] == [
        {"type": "array", "items": {"type": "string"}},
        {"$ref": field_errors},
    ]
    assert component(schema, key_conflict)["properties"]["mismatch"]["type"] == "array"


def test_lists_document_integer_page_sizes_and_the_cursors_to_pass_back(
    schema: dict[str, Any],
) -> None:
    listing = schema["paths"]["/v1/orders"]["get"]
    parameters = {p["name"]: p for p in listing["parameters"] if p["in"] == "query"}
    page = listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]

    assert parameters["pageSize"]["schema"] == {
        "type": "integer",
        "minimum": 1,
        "maximum": 200,
        "default": 50,
    }
    assert parameters["cursor"]["schema"] == {"type": "string"}
    assert {"nextCursor", "previousCursor"} <= set(component(schema, page)["required"])


def test_every_links_member_is_a_named_component(schema: dict[str, Any]) -> None:
    for name, body in schema["components"]["schemas"].items():
        links = body.get("properties", {}).get("links")
        if links is None:
            continue

        reference = links.get("$ref") or links["allOf"][0]["$ref"]
        assert component(schema, reference)["properties"]["self"]["type"] == "string", name


def test_every_operation_requires_the_bearer_token(schema: dict[str, Any]) -> None:
    everything = operations(schema, ("get", *COMMAND_METHODS))

    assert schema["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["bearerAuth"]["description"],
    }
    for path, method, operation in everything:
        if path in PUBLIC:
            assert "security" not in operation, (method, path)
            assert "401" not in operation["responses"], (method, path)
        else:
            assert operation["security"] == [{"bearerAuth": []}], (method, path)


def test_the_api_description_states_retention_and_conflict_policy(schema: dict[str, Any]) -> None:
    description = schema["info"]["description"]

    assert "IDEMPOTENCY_KEY_TTL" in description
    assert "IdempotencyKeyConflict" in description
    assert "Idempotent-Replayed: true" in description


# --- Which answers a command stores: as idempotency.schema.STORED_ANSWERS says ---

Answer = tuple[int, str | None]
# An item of a problem response's description: "- `Code`: when. Stored…".
DESCRIBED_CODE = re.compile(r"^- `(\w+)`: (.*)$", re.MULTILINE)
# The policy's list of replayed failures: "400 `ValidationError`; 409 `A`, `B`; …".
REPLAYED_FAILURES = re.compile(r"final failures are replayed too: (.*?)\. A command")
FAILURE_GROUP = re.compile(r"(\d{3}) ((?:`\w+`(?:, )?)+)")


@pytest.fixture
def registry() -> dict[str, frozenset[Answer]]:
    """STORED_ANSWERS, complete: the URLconf imports every command's view, and its schema."""
    get_resolver().url_patterns  # noqa: B018 - loading it is the point
    return STORED_ANSWERS


def described_answers(operation: dict[str, Any]) -> list[tuple[Answer, str]]:
    """Each answer an operation documents, (status, code or None), with what it says of it."""
    described: list[tuple[Answer, str]] = []
    for status, response in operation["responses"].items():
        if "application/problem+json" in response.get("content", {}):
            described += [
                ((int(status), code), text)
                for code, text in DESCRIBED_CODE.findall(response["description"])
            ]
        else:
            described.append(((int(status), None), response["description"]))
    return described


def says_stored(text: str) -> bool:
    """True for "Stored and replayed under the key.", False for "Not stored: …"; nothing else."""
    stored, not_stored = text.endswith(STORED), NOT_STORED in text
    assert stored != not_stored, text
    assert text.count(STORED) == int(stored), text
    return stored


def replayed_failures(description: str) -> set[Answer]:
    (failures,) = REPLAYED_FAILURES.findall(description)
    return {
        (int(status), code)
        for status, codes in FAILURE_GROUP.findall(failures)
        for code in re.findall(r"`(\w+)`", codes)
    }


def test_every_command_of_the_schema_is_in_the_registry(
    schema: dict[str, Any], registry: dict[str, frozenset[Answer]]
) -> None:
    commands = {op["operationId"] for _, _, op in operations(schema, COMMAND_METHODS)}

    assert commands == set(registry)


def test_each_answer_of_a_command_says_whether_its_key_stores_it_as_the_registry_does(
    schema: dict[str, Any], registry: dict[str, frozenset[Answer]]
) -> None:
    for path, method, operation in operations(schema, COMMAND_METHODS):
        described = described_answers(operation)
        stored = {answer for answer, text in described if says_stored(text)}

        assert stored == registry[operation["operationId"]], (method, path)


def test_the_replayed_header_is_documented_on_exactly_the_statuses_a_command_stores(
    schema: dict[str, Any], registry: dict[str, frozenset[Answer]]
) -> None:
    for path, method, operation in operations(schema, COMMAND_METHODS):
        with_header = {
            int(status)
            for status, response in operation["responses"].items()
            if "Idempotent-Replayed" in response.get("headers", {})
        }

        assert with_header == {s for s, _ in registry[operation["operationId"]]}, (method, path)


def test_no_answer_of_a_read_speaks_of_storing(schema: dict[str, Any]) -> None:
    for path, method, operation in operations(schema, ("get",)):
        for _, text in described_answers(operation):
            assert "stored" not in text.lower(), (method, path, text)


def test_the_policy_names_the_failures_the_registry_says_are_replayed(
    schema: dict[str, Any], registry: dict[str, frozenset[Answer]]
) -> None:
    every_failure = {(s, code) for s, code in all_stored_answers() if code is not None}

    assert replayed_failures(schema["info"]["description"]) == every_failure
    for path, method, operation in operations(schema, COMMAND_METHODS):
        (key,) = [p for p in operation["parameters"] if p["name"] == "Idempotency-Key"]
        own = {(s, code) for s, code in registry[operation["operationId"]] if code is not None}
        assert replayed_failures(key["description"]) == own, (method, path)


def test_the_policy_is_not_written_from_an_empty_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(command_schemas, "STORED_ANSWERS", {})

    with pytest.raises(RuntimeError, match="URLconf"):
        command_schemas.policy_markdown()


@pytest.fixture
def unmanifested_static(settings: Settings) -> None:
    """Static URLs without collectstatic (tests/docs/test_docs_browser.py serves the real files)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }


@pytest.mark.usefixtures("unmanifested_static")
@pytest.mark.parametrize("page", ["/docs/", "/redoc/"])
def test_the_docs_pages_reference_no_external_host(page: str) -> None:
    response = Client().get(page)

    assert response.status_code == 200
    html = response.content.decode()
    assert "/static/drf_spectacular_sidecar/" in html
    assert set(ABSOLUTE_URL.findall(html)) <= {"testserver"}


def test_the_white_space_of_string_patterns_is_what_drf_trims() -> None:
    pattern = re.compile(f"[{PYTHON_WHITESPACE}]")

    trimmed = {chr(c) for c in range(0x110000) if chr(c).isspace()}

    assert trimmed == {chr(c) for c in range(0x110000) if pattern.fullmatch(chr(c))}


# --- The one private call into drf-spectacular (api.openapi.strict.default_serializer_schema) ---


class TwoMembers(serializers.Serializer[Any]):
    """A name and a count."""

    name = serializers.CharField(max_length=8, help_text="Its name.")
    count = serializers.IntegerField(required=False, min_value=1)


def test_the_private_mapping_of_a_serializer_is_the_one_the_schema_was_built_on() -> None:
    # An upgrade of drf-spectacular that renames the method, changes its
    # arguments or what it makes of plain fields fails here, before it
    # changes every strict input's schema.
    mapping = inspect.signature(AutoSchema._map_basic_serializer)
    auto_schema = AutoSchema()
    auto_schema.view = APIView()

    schema = default_serializer_schema(
        auto_schema, TwoMembers(context={"request": None}), "request"
    )

    assert list(mapping.parameters) == ["self", "serializer", "direction"]
    assert schema == {
        "type": "object",
        "description": "A name and a count.",
        "properties": {
            "name": {"type": "string", "description": "Its name.", "maxLength": 8},
            "count": {"type": "integer", "minimum": 1},
        },
        "required": ["name"],
    }


def test_no_integer_is_documented_past_what_json_carries_exactly(schema: dict[str, Any]) -> None:
    # A bound of 2^63 (a BigIntegerField's) makes generated examples that no
    # answer holds, and that JavaScript rounds (Swagger UI showed a quantity
    # of 9223372036854776000).
    def bounds(node: Any, at: str) -> list[tuple[str, int]]:
        if isinstance(node, list):
            return [found for i, item in enumerate(node) for found in bounds(item, f"{at}/{i}")]
        if not isinstance(node, dict):
            return []
        here = [
            (f"{at}/{name}", node[name])
            for name in ("maximum", "minimum")
            if isinstance(node.get(name), int) and abs(node[name]) > 2**53 - 1
        ]
        return here + [found for k, v in node.items() for found in bounds(v, f"{at}/{k}")]

    assert bounds(schema, "") == []


def test_the_documented_414_is_the_one_gunicorn_answers() -> None:
    from api.errors import UriTooLong
    from api.gunicorn_worker import _PROBLEMS

    assert _PROBLEMS[414] == (UriTooLong.code, UriTooLong.title, UriTooLong.default_message)
