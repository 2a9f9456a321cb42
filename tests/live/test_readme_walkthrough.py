"""The README's walkthrough, run as written against `make run`'s service, and again after a restart.

The walkthrough is one ```sh block: numbered steps, each a `curl` line and,
under it in comments, the answer a reader gets (the status line, the
headers it names, the body, where `…` stands for anything). This test
takes the block from README.md and runs each step with bash and curl,
substituting only what a reader substitutes: the token `make run`
printed, the service's address, the order's id from step 1's answer and
the operation's id from step 4's. Each answer is compared with the
comment lines under its step; a step whose description says it answers
"processing" until the worker is done is polled, with a deadline, until
it matches. The service is the one `make run` starts: its embedded
default (SQLite files under a `var/` of the test's own), the demo catalog
and a demo token, made by the commands `make run` runs.

The paragraph after the block is checked too: the provider's ledger
holds one charge however often step 4 is sent, and after a restart (a
new token, the same `var/`) the walkthrough replays the first order and
payment, which `GET /v1/idempotency-keys/demo-1` shows.

The README's other ```sh blocks are run elsewhere, and
tests/docs/test_readme_examples.py holds the list of which test runs each.
"""

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.live import ROOT, LiveService, base_env, manage, serve
from tests.support.waits import wait_for

README = ROOT / "README.md"
SECTION = "## Walkthrough: create, replay, conflict, pay"
BASH = shutil.which("bash") or "bash"
CURL = shutil.which("curl") or "curl"

_SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_STEP = re.compile(r"^# (\d+)\. ", re.MULTILINE)
_HEADER = re.compile(r"^([A-Za-z][A-Za-z-]*): (.*)$")
# "Location: /v1/orders/ord_…            (the same order)": a remark after the value.
_REMARK = re.compile(r"\s{2,}\(.*\)$")
# What a reader types in place of each placeholder, found in the answers before it.
_ORDER_ID = re.compile(r"/v1/orders/(ord_[0-9a-z]+)")
_OPERATION_ID = re.compile(r"/v1/operations/(op_[0-9a-z]+)")


@dataclass(frozen=True)
class Shown:
    """The answer a step shows under it: `…` in any part stands for anything."""

    status_line: str | None
    headers: dict[str, str]
    body: str | None


@dataclass(frozen=True)
class Step:
    number: int
    description: str
    code: str
    shown: Shown

    @property
    def polls(self) -> bool:
        return '"processing" until' in self.description


@dataclass(frozen=True)
class Walkthrough:
    setup: str
    steps: list[Step]


@dataclass(frozen=True)
class Answer:
    """What curl printed, read as the block reads it."""

    text: str
    status_line: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


def shown_answer(lines: list[str]) -> Shown:
    status_line: str | None = None
    headers: dict[str, str] = {}
    body: list[str] = []
    for line in lines:
        if line.startswith("HTTP/"):
            status_line = line
        elif not body and (header := _HEADER.match(line)):
            headers[header.group(1)] = _REMARK.sub("", header.group(2))
        else:
            # A body broken over several comment lines continues indented.
            body.append(line.strip())
    return Shown(status_line, headers, "".join(body) or None)


def parse_step(number: int, text: str) -> Step:
    """A step from its text after "# N. ": its description, its code, the answer under it."""
    heading, *lines = text.splitlines()
    described = 0
    while lines[described].startswith("#"):
        described += 1
    code = [line for line in lines[described:] if line and not line.startswith("#")]
    shown = [
        line.removeprefix("#").removeprefix(" ")
        for line in lines[described:]
        if line.startswith("#")
    ]
    description = " ".join([heading, *(line.lstrip("# ") for line in lines[:described])])
    return Step(number, description, "\n".join(code), shown_answer(shown))


def walkthrough() -> Walkthrough:
    """The walkthrough's block: the lines before step 1, and each step."""
    section = README.read_text().split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]
    (block,) = _SH_BLOCK.findall(section)
    setup, *numbered = _STEP.split(block)
    steps = [
        parse_step(int(number), text)
        for number, text in zip(numbered[::2], numbered[1::2], strict=True)
    ]
    return Walkthrough(setup, steps)


def read_answer(text: str, shown: Shown) -> Answer:
    if shown.status_line is None:  # curl -s: the body alone
        return Answer(text, body=text.strip())
    head, _, body = text.partition("\r\n\r\n")
    status_line, *header_lines = head.split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(": ")
        headers[name.lower()] = value
    return Answer(text, status_line, headers, body.strip())


def _pattern(shown: str) -> re.Pattern[str]:
    return re.compile(".*?".join(re.escape(part) for part in shown.split("…")), re.DOTALL)


def differences(shown: Shown, answer: Answer) -> list[str]:
    """How ``answer`` differs from what the step shows; nothing if it is as shown."""
    found = []
    if shown.status_line is not None and answer.status_line != shown.status_line:
        found.append(f"status line {answer.status_line!r}, shown {shown.status_line!r}")
    for name, value in shown.headers.items():
        got = answer.header(name)
        if got is None or not _pattern(value).fullmatch(got):
            found.append(f"{name}: {got!r}, shown {value!r}")
    if shown.body is not None and not _pattern(shown.body).fullmatch(answer.body):
        found.append(f"body {answer.body!r}, shown {shown.body!r}")
    return found


def as_a_reader_types(code: str, typed: Mapping[str, str]) -> str:
    """``code`` with each placeholder replaced as a reader replaces it; fails on one unknown."""
    for placeholder, value in typed.items():
        code = code.replace(placeholder, value)
    assert "…" not in code, f"a placeholder this test does not know how to fill:\n{code}"
    return code


class Reader:
    """Someone at a terminal, pasting the walkthrough's lines one step at a time."""

    def __init__(self, home: Path, service: LiveService, token: str) -> None:
        self.home = home
        self.typed: dict[str, str] = {}
        self.setup = self._setup(walkthrough().setup, service, token)

    @staticmethod
    def _setup(setup: str, service: LiveService, token: str) -> str:
        setup, tokens = re.subn(r"^TOKEN=osk_….*$", f"TOKEN={token}", setup, flags=re.MULTILINE)
        setup, apis = re.subn(
            r"^API=http://127\.0\.0\.1:8000$", f"API={service.base_url}", setup, flags=re.MULTILINE
        )
        assert (tokens, apis) == (1, 1), f"the walkthrough sets TOKEN or API otherwise:\n{setup}"
        return setup

    def run(self, step: Step) -> Answer:
        return self.run_code(step.code, step.shown, what=f"step {step.number}")

    def run_code(self, code: str, shown: Shown, *, what: str) -> Answer:
        code = as_a_reader_types(code, self.typed)
        # A HOME of its own: no ~/.curlrc of the machine's changes what curl sends.
        result = subprocess.run(
            [BASH, "-c", f"{self.setup}\n{code}"],
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home)},
            capture_output=True,
            timeout=60,
        )
        # Bytes: text mode would turn the head's CRLFs into the body's LFs.
        assert result.returncode == 0, f"{what}:\n{code}\n{result.stderr.decode()}"
        answer = read_answer(result.stdout.decode(), shown)
        # The ids a reader copies from this answer into later steps.
        if order := _ORDER_ID.search(answer.text):
            self.typed.setdefault("ord_…", order.group(1))
        if operation := _OPERATION_ID.search(answer.text):
            self.typed.setdefault("op_…", operation.group(1))
        return answer

    def run_as_shown(self, step: Step) -> Answer:
        """The step's answer, once it is the one shown; a polling step is run until it is."""
        if not step.polls:
            answer = self.run(step)
            found = differences(step.shown, answer)
            assert found == [], (
                f"step {step.number} answered otherwise than the README shows: {found}\n"
                f"{answer.text}"
            )
            return answer
        return wait_for(
            lambda: self.run(step),
            lambda answer: differences(step.shown, answer) == [],
            30,
            interval=0.1,
            what=f"step {step.number} answering as the README shows",
        )


@contextmanager
def make_run_service(env: Mapping[str, str]) -> Iterator[tuple[LiveService, str]]:
    """The service as `make run` starts it on ``env``'s `var/`, and the demo token it prints."""
    manage("migrate", "--noinput", "-v0", env=env)
    manage("seed_demo", env=env)
    issued = manage("create_api_client", "demo", "demo", "--revoke-earlier", env=env)
    token = issued.splitlines()[-1]
    with serve(env, celery=True) as service:
        yield service, token


def ledger(env: Mapping[str, str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in manage("provider_ledger", env=env).splitlines()]


def test_the_walkthrough_parses_into_the_steps_the_readme_explains() -> None:
    steps = walkthrough().steps

    assert [step.number for step in steps] == [1, 2, 3, 4, 5]
    assert [step.polls for step in steps] == [False, False, False, False, True]
    assert all(step.shown.status_line or step.shown.body for step in steps)
    assert steps[1].shown.headers == {
        "Location": "/v1/orders/ord_…",
        "Idempotent-Replayed": "true",
    }


def test_the_walkthrough_answers_as_shown_and_replays_after_a_restart(tmp_path: Path) -> None:
    assert Path(CURL).exists(), "the walkthrough needs curl"
    steps = walkthrough().steps
    env = base_env(VAR_DIR=str(tmp_path / "var"))

    with make_run_service(env) as (service, token):
        reader = Reader(tmp_path, service, token)
        first = [reader.run_as_shown(step) for step in steps]
        retried = reader.run(steps[3])
    charges = ledger(env)
    with make_run_service(env) as (service, token):
        again = Reader(tmp_path, service, token)
        second = [again.run(step) for step in steps]
        looked_up = again.run_code(
            'curl -s $API/v1/idempotency-keys/demo-1 -H "Authorization: Bearer $TOKEN"',
            Shown(None, {}, None),
            what="the look-up",
        )

    created, replayed, _, accepted, _ = first
    # Step 2 is step 1's answer byte for byte, and step 1's order.
    assert replayed.body == created.body
    assert replayed.header("Location") == created.header("Location")
    # However often step 4 is sent: one charge.
    assert retried.header("Location") == accepted.header("Location")
    assert [entry["kind"] for entry in charges] == ["charge"]
    # After the restart, under a new token: the first order and payment, replayed.
    assert [answer.header("Location") for answer in (second[0], second[3])] == [
        created.header("Location"),
        accepted.header("Location"),
    ]
    assert (
        second[0].header("Idempotent-Replayed") == second[3].header("Idempotent-Replayed") == "true"
    )
    assert [differences(steps[n].shown, second[n]) for n in (2, 4)] == [[], []]
    assert json.loads(looked_up.body)["links"]["result"] == created.header("Location")
    assert [entry["kind"] for entry in ledger(env)] == ["charge"]
