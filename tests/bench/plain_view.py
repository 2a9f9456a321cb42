"""PostgreSQL's ceiling for a create, sent through the service's stack by a plain Django view.

The ceiling (tests/bench/ceiling.py) is what PostgreSQL alone does with a
create's minimal transaction, pgbench sending it. ``POST /bench/plain/orders``
sends that very transaction from a plain Django view, statement by
statement, as pgbench does (the same text, the same values put in, the
simple protocol): through gunicorn, Django's handler and middleware, a
Django cursor and psycopg, with no DRF, no validation, no rendering and
no protocol. Its rate is what any create served by this stack costs
before the service does anything of its own; ``make bench`` prints it over
the ceiling, and a first execution's over it (docs/SCALING.md, "The
ceiling through the stack").

Served by the bench alone (tests/bench/urls.py), never by the service.
"""

import hashlib
import os
import re
import secrets

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from tests.bench.ceiling import SCRIPTS

SCRIPT = SCRIPTS / "create_order.sql"
# The variables the script uses: pgbench's (-D, \set, \gset and its own
# client_id), each put in as text, as pgbench does over the simple protocol.
_VARIABLE = re.compile(r"(?<!:):(digest|principal|tenant|client_id|key_id|k)\b")


def statements(script: str) -> list[str]:
    """The script's SQL statements, in order: comments and ``\\set`` lines left out.

    A statement ends with ``;`` or with ``\\gset`` (pgbench then keeps its
    one row's columns as variables).
    """
    lines = [line for line in script.splitlines() if not line.lstrip().startswith(("--", "\\set"))]
    parts = re.split(r"(?:;|\\gset)[ \t]*\n", "\n".join(lines) + "\n")
    return [part.strip() for part in parts if part.strip()]


STATEMENTS = statements(SCRIPT.read_text())


@csrf_exempt
def create_order_plainly(request: HttpRequest) -> HttpResponse:
    """The ceiling's transaction for the caller's bearer token; ``201`` with the order's id."""
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    values = {
        "digest": hashlib.sha256(token.encode()).hexdigest(),
        # pgbench's client number keeps its clients' ids apart; here each
        # process is a client.
        "client_id": str(os.getpid()),
        "k": str(secrets.randbelow(9 * 10**18) + 1),
    }
    with connection.cursor() as cursor:
        for statement in STATEMENTS:
            cursor.execute(_VARIABLE.sub(lambda m: values[m.group(1)], statement))
            if statement.startswith("SELECT t.id"):  # the token: its principal and tenant
                row = cursor.fetchone()
                if row is None:
                    return HttpResponse(status=401)
                values["principal"], values["tenant"] = str(row[1]), str(row[7])
            elif "RETURNING id AS key_id" in statement:
                values["key_id"] = str(cursor.fetchone()[0])
    order_id = f"ord_c{values['client_id']}-{values['k']}"
    return HttpResponse(f'{{"orderId":"{order_id}"}}', status=201, content_type="application/json")
