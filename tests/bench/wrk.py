"""wrk, the load generator the benches drive (Debian's ``wrk``, installed by ``make bench``).

wrk costs about 0.07 ms of CPU per request, several times less than a
Python client, so on a machine of two cores it takes the least from the
server it measures. Each run is described by a small Lua script: the
method, path, headers and body of every request, a fresh
``Idempotency-Key`` per request where asked, and a ``done`` hook that
prints the figures as one JSON line, so nothing is parsed from wrk's
human-readable report. A run either lasts its seconds (``run``) or goes on
in the background beside something else until stopped (``Background``).
"""

import json
import secrets
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

WRK = shutil.which("wrk") or "/usr/bin/wrk"

_SCRIPT = """
local method, path, body = %(method)s, %(path)s, %(body)s
local headers = %(headers)s
local key, fresh_keys, scatter_keys = %(key)s, %(fresh_keys)s, %(scatter_keys)s
local numbered = %(numbered)s
local counter = 0

function setup(thread)
  -- Each wrk thread numbers its own keys under a prefix of its own.
  thread:set("prefix", key .. "-" .. tostring(math.random(1, 2^30)) .. "-")
end

function init(args)
  -- LuaJIT's generator starts alike in every process: seeded per run, two
  -- runs in a row scatter their keys differently.
  math.randomseed(%(seed)d)
end

function request()
  counter = counter + 1
  if fresh_keys then
    local lead = ""
    if scatter_keys then
      lead = string.format("%%08x%%08x-", math.random(0, 0x7fffffff), math.random(0, 0x7fffffff))
    end
    headers["Idempotency-Key"] = lead .. prefix .. counter
  elseif key ~= "" then
    headers["Idempotency-Key"] = key
  end
  if numbered then
    return wrk.format(method, path, headers, (string.gsub(body, "@N@", tostring(counter))))
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
    # With fresh_keys, start each key with 16 random hex digits: new keys
    # then land all over the key index, as UUIDs do, rather than side by
    # side at one place of it, which stays in cache however large the table
    # is. What tests/bench/keys.py measures of a table of 10^6 keys needs it.
    scatter_keys: bool = False
    # Each request's number (1, 2, …) in place of every "@N@" of the body:
    # a payment of an order of its own each, made beforehand.
    numbered: bool = False


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


def run(
    base_url: str,
    load: Load,
    *,
    connections: int = 16,
    seconds: float = 5,
    timeout: float = 10,
    allow_failures: bool = False,
) -> Result:
    """Drive ``load`` against ``base_url`` for ``seconds`` over ``connections`` connections.

    A request slower than ``timeout`` seconds counts as failed, not as a latency.

    :raises AssertionError: a request failed, unless ``allow_failures``; a
        ratio of failures is no measure.
    :raises subprocess.CalledProcessError: wrk failed.
    """
    return Background(
        base_url,
        load,
        connections=connections,
        seconds=seconds,
        timeout=timeout,
        allow_failures=allow_failures,
    ).wait()


class Background:
    """A wrk run started in the background, to load the service while something else runs.

    ``stop()`` ends it early and returns what it measured until then;
    ``seconds`` is only the longest it may last.
    """

    def __init__(
        self,
        base_url: str,
        load: Load,
        *,
        connections: int = 16,
        seconds: float = 600,
        timeout: float = 10,
        allow_failures: bool = False,
    ) -> None:
        self._load = load
        self._allow_failures = allow_failures
        self._folder = tempfile.TemporaryDirectory()
        script = Path(self._folder.name) / "load.lua"
        script.write_text(_script(load))
        self._process = subprocess.Popen(
            [
                WRK,
                "--threads=1",
                f"--connections={connections}",
                f"--duration={max(1, round(seconds))}s",
                f"--timeout={max(1, round(timeout))}s",
                f"--script={script}",
                base_url,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def stop(self) -> Result:
        """End wrk now; returns what it measured until then.

        On SIGINT wrk stops its connections and still reports, ``done()``
        hook included (wrk.c: the handler ends the ``sleep`` of the run).
        While it starts up it ignores SIGINT, so the signal is sent again
        until wrk has ended.

        :raises AssertionError: as ``run``.
        :raises subprocess.CalledProcessError: wrk failed.
        """
        for _ in range(30):
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGINT)
            try:
                return self.wait(within_s=1)
            except subprocess.TimeoutExpired:
                continue
        self._process.kill()
        return self.wait()

    def wait(self, *, within_s: float | None = None) -> Result:
        """Wait for wrk to end (its seconds up, or stopped); returns what it measured.

        :raises subprocess.TimeoutExpired: wrk still runs after ``within_s``.
        :raises AssertionError: as ``run``.
        :raises subprocess.CalledProcessError: wrk failed.
        :raises RuntimeError: wrk printed no figures.
        """
        stdout, stderr = self._process.communicate(timeout=within_s)
        self._folder.cleanup()
        if self._process.returncode:
            raise subprocess.CalledProcessError(
                self._process.returncode, self._process.args, stdout, stderr
            )
        # done() prints its line last, after wrk's own report.
        last = (stdout.strip().splitlines() or [""])[-1]
        if not last.startswith("{"):
            raise RuntimeError(f"wrk printed no figures:\n{stdout}{stderr}")
        figures = json.loads(last)
        outcome = Result(
            requests=figures["requests"],
            seconds=figures["seconds"],
            p50_ms=figures["p50_us"] / 1000,
            p99_ms=figures["p99_us"] / 1000,
            failed=figures["failed"],
        )
        assert self._allow_failures or outcome.failed == 0, (
            f"{outcome.failed} of {outcome.requests} failed: {self._load}"
        )
        return outcome


def _script(load: Load) -> str:
    """The Lua script of ``load``'s requests, with the ``done()`` hook that reports.

    Every request asks for its connection to be closed after it, as nginx
    does with gunicorn (deploy/nginx/), so that each request goes to
    whichever gunicorn worker accepts it first. A kept-alive connection
    stays with the worker that took it: an uneven split (12 and 4 of 16
    connections over two workers) leaves a core idle and halves the
    figures at random.
    """
    headers = {**load.headers, "Connection": "close"}
    return _SCRIPT % {
        "method": _lua(load.method),
        "path": _lua(load.path),
        "body": _lua(load.body),
        "headers": "{" + ", ".join(f"[{_lua(k)}] = {_lua(v)}" for k, v in headers.items()) + "}",
        "key": _lua(load.key or (uuid.uuid4().hex if load.fresh_keys else "")),
        "fresh_keys": "true" if load.fresh_keys else "false",
        "scatter_keys": "true" if load.scatter_keys else "false",
        "numbered": "true" if load.numbered else "false",
        "seed": secrets.randbelow(2**31),
    }


def _lua(text: str) -> str:
    """A Lua string literal of ``text`` (JSON's escapes are Lua's for these strings)."""
    return json.dumps(text)
