"""The Celery app: ``celery -A config worker`` and ``celery -A config beat``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

if app.conf.broker_url.startswith("sqla+"):
    from kombu.transport import sqlalchemy

    # The embedded broker polls its table, once a second by default, which
    # would add up to a second to every task. kombu passes transport options
    # to SQLAlchemy's create_engine (which rejects this one), so the polling
    # interval is set on the transport class itself.
    sqlalchemy.Transport.polling_interval = 0.1
