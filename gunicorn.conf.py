"""gunicorn reads this file by itself when it starts in this directory.

So the plain ``gunicorn config.wsgi:application -w 4`` gets the project's
settings (config/gunicorn.py), as ``-c config/gunicorn.py`` does: worker
class and timeouts, and above all the directory where the worker processes
add up their metrics. Options on the command line still win. Started from
another directory, gunicorn does not see this file: pass
``-c /path/to/config/gunicorn.py`` there.
"""

import runpy
from pathlib import Path

# Run by path rather than imported as ``config.gunicorn``: importing the
# ``config`` package loads the Celery app, and with it Django's settings,
# into gunicorn's master process, which must stay free of the application.
globals().update(runpy.run_path(str(Path(__file__).resolve().parent / "config" / "gunicorn.py")))
