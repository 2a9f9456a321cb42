"""config/gunicorn.py with the metrics archive off, as the service was before it.

``SOAK_HTTP_ARCHIVE=0`` serves the HTTP soak (tests/bench/soak_http.py) with
this file as gunicorn's last ``-c``, so that the soak measures what the
archive changes: dead workers' files are left in the metrics directory,
where every scrape reads them. Scrapes still take the archive's lock
(observability/metrics.py), which no fold then ever holds.
"""

import runpy
from pathlib import Path
from typing import Any

from prometheus_client import multiprocess

CONFIG = Path(__file__).resolve().parents[2] / "config" / "gunicorn.py"
globals().update(runpy.run_path(str(CONFIG)))


# Replaces the configuration's hook, which folds the dead worker's files.
def child_exit(server: Any, worker: Any) -> None:
    multiprocess.mark_process_dead(worker.pid)
