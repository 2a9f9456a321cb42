from django.db import models


class RateLimitWindow(models.Model):
    """How many requests one client sent in one fixed window of ``API_THROTTLE_RATE``.

    In the database, not in a process's memory, so that every worker
    process (and every server) counts against the same limit.
    """

    # "principal:<pk>", or "address:<ip>" for the few views that need no login.
    ident = models.CharField(max_length=100)
    # Start of the window, in whole seconds since the epoch: windows are
    # aligned to their length, so every process computes the same start.
    window_start = models.BigIntegerField()
    hits = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            # The conflict target of the throttle's upsert.
            models.UniqueConstraint(
                fields=["ident", "window_start"], name="ratelimitwindow_one_per_window"
            ),
        ]
        # Expired windows are deleted by their start.
        indexes = [models.Index(fields=["window_start"], name="ratelimitwindow_start")]

    def __str__(self) -> str:
        return f"{self.ident}@{self.window_start}: {self.hits}"
