"""A client process that sends one command and then dies or hangs inside it.

Run by the crash-safety tests as ``python -m tests.support.crashing_client MODE KEY TOKEN``
with ``DATABASE_URL`` naming the test database:

- ``create``: POST /v1/orders in this process (the test kills it while the
  command waits on a lock the test holds).
- ``hang``: POST to a command that idles in its transaction; prints
  ``started`` once the command runs with its key claimed.
- ``stuck``: POST to a command stuck in a database statement (run with
  ``PROBE_STUCK_SECONDS`` set).
"""

import json
import os
import sys
import threading

import django


def main(mode: str, key: str, token: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from django.conf import settings
    from django.test import Client

    settings.ROOT_URLCONF = "tests.support.probes"
    from tests.support import probes

    client = Client()
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    if mode == "stuck":
        client.post("/v1/probes/stuck", "{}", content_type="application/json", headers=headers)
        return
    if mode == "create":
        body = {"customerId": "crash", "items": [{"sku": "ABC", "qty": 1}], "currency": "RUB"}
        client.post(
            "/v1/orders", json.dumps(body), content_type="application/json", headers=headers
        )
        return

    thread = threading.Thread(
        target=client.post,
        args=("/v1/probes/slow", "{}"),
        kwargs={"content_type": "application/json", "headers": headers},
        daemon=True,
    )
    thread.start()
    probes.slow_command_started.wait(timeout=30)
    print("started", flush=True)
    thread.join(timeout=60)


if __name__ == "__main__":
    main(*sys.argv[1:4])
