import gc
import os

from django.core.wsgi import get_wsgi_application

from api.middleware import WholeBodyMiddleware
from observability.exporting import export_if_configured

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# Before the application loads its middleware, which the Django
# instrumentation joins, and after the fork: gunicorn loads this module in
# each worker (config/gunicorn.py does not preload the application).
export_if_configured(django=True)
application = WholeBodyMiddleware(get_wsgi_application())

# What the application built while loading lives as long as the process.
# Frozen, it is left out of the garbage collector's full passes, which
# otherwise re-scan it each time a large request body is parsed into many
# containers (what that saves a large body: docs/SCALING.md, "Hostile bodies").
gc.freeze()
