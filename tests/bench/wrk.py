"""wrk, the load generator the benches drive (Debian's ``wrk``, installed by ``make bench``).

wrk costs about 0.07 ms of CPU per request, several times less than a
Python client, so on a machine of two cores it takes the least from the
server it measures. Each run is described by a small Lua script: the
method, path, headers and body of every request, a fresh
``Idempotency-Key`` per request where asked, and a ``done`` hook that
prints the figures as one JSON line, so nothing is parsed from wrk's
human-readable report.
"""

import json
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

WRK = shutil.which("wrk") or "/usr/bin/wrk"

_SCRIPT = """
local method, path, body = %(method)s, %(path)s, %(body)s
local headers = %(headers)s
local key, fresh_keys = %(key)s, %(fresh_keys)s
local counter = 0

function setup(thread)
  -- Each wrk thread numbers its own keys under a prefix of its own.
  thread:set("prefix", key .. "-" .. tostring(math.random(1, 2^30)) .. "-")
end

function request()
  if fresh_keys then
    counter = counter + 1
    headers["Idempotency-Key"] = prefix .. counter
  elseif key ~= "" then
    headers["Idempotency-Key"] = key
  end
  return wrk.format(method, path, headers, body)
end

function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    '{"requests": %%d, "seconds": %%f, "p50_us": %%d, "p99_us": %%d, "failed": %%d}\\n',
    summary.requests, summary.duration / 1e6,
    latency:percentile(50), latency:percentile(99),
    errors.connect + errors.read + errors.write + errors.status + errors.timeout))
end
"""


@dataclass(frozen=True)
class Load:
    """What each request of a run is: the same request, or the same with a fresh key."""

    method: str
    path: str
    headers: dict[str, str]
    body: str = ""
    # "": no Idempotency-Key. With fresh_keys, the prefix of a new key per
    # request (a first execution each); without, the one key every request
    # sends (a replay each, after the first).
    key: str = ""
    fresh_keys: bool = False


@dataclass(frozen=True)
class Result:
    requests: int
    seconds: float
    p50_ms: float
    p99_ms: float
    # Connection errors, timeouts and answers that are not 2xx or 3xx.
    failed: int

    @property
    def rate(self) -> float:
        return self.requests / self.seconds


def run(base_url: str, load: Load, *, connections: int = 16, seconds: float = 5) -> Result:
    """Drive ``load`` against ``base_url`` for ``seconds`` over ``connections`` connections.

    :raises AssertionError: a request failed; a ratio of failures is no measure.
    """
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "load.lua"
        script.write_text(
            _SCRIPT
            % {
                "method": _lua(load.method),
                "path": _lua(load.path),
                "body": _lua(load.body),
                "headers": "{"
                + ", ".join(f"[{_lua(k)}] = {_lua(v)}" for k, v in load.headers.items())
                + "}",
                "key": _lua(load.key or (uuid.uuid4().hex if load.fresh_keys else "")),
                "fresh_keys": "true" if load.fresh_keys else "false",
            }
        )
        result = subprocess.run(
            [
                WRK,
                "--threads=1",
                f"--connections={connections}",
                f"--duration={max(1, round(seconds))}s",
                "--timeout=10s",
                f"--script={script}",
                base_url,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    outcome = Result(
        requests=figures["requests"],
        seconds=figures["seconds"],
        p50_ms=figures["p50_us"] / 1000,
        p99_ms=figures["p99_us"] / 1000,
        failed=figures["failed"],
    )
    assert outcome.failed == 0, f"{outcome.failed} of {outcome.requests} failed: {load}"
    return outcome


def _lua(text: str) -> str:
    """A Lua string literal of ``text`` (JSON's escapes are Lua's for these strings)."""
    return json.dumps(text)
