"""The bench's WSGI application: the service's, with the bench's URLs (tests/bench/urls.py).

Only ``make bench`` serves it; production serves ``config.wsgi``. The URL
configuration is swapped here, before the application is built, rather
than in a settings module of the bench's own: importing ``config`` makes
its Celery app read the settings, which would be a settings module still
half-imported.
"""

import os

from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
settings.ROOT_URLCONF = "tests.bench.urls"

from config.wsgi import application  # noqa: E402 - after the swap, before any request

__all__ = ["application"]
