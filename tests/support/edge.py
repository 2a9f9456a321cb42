"""The service behind nginx, as docker-compose.yml deploys it, on this machine.

Debian's nginx runs the repository's template (deploy/nginx/), rendered as
the nginx image renders it, under a main config of the harness's own that
keeps its pid file, logs and temporary files in a directory of the test's.
Also raw HTTP over a socket, for requests no HTTP library will send.
"""

import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.support import servers
from tests.support.live import ROOT, LiveService, free_port, serve
from tests.support.waits import wait_until

NGINX = Path("/usr/sbin/nginx")
TEMPLATE = ROOT / "deploy" / "nginx" / "order-service.conf.template"
# The environment variables the template is meant to have replaced.
TEMPLATE_VARIABLES = ("NGINX_LISTEN", "NGINX_UPSTREAM")
# Those that may be left unset, as the template is written to allow.
OPTIONAL_TEMPLATE_VARIABLES = ("NGINX_FORWARD_ADMIN",)


def render_template(variables: Mapping[str, str]) -> str:
    """The template with ``${NAME}`` replaced, as the image's envsubst does it.

    envsubst replaces only the variables that are set; the others stay as
    they are written, as they do here.
    """
    assert set(TEMPLATE_VARIABLES) <= set(variables)
    assert set(variables) <= {*TEMPLATE_VARIABLES, *OPTIONAL_TEMPLATE_VARIABLES}
    text = TEMPLATE.read_text()
    for name, value in variables.items():
        text = text.replace(f"${{{name}}}", value)
    return text


def _main_config(workdir: Path, rendered: Path) -> str:
    # Workers run as root here: the test's directory is not open to nobody,
    # and nginx switches to its default user only when started as root.
    user = "user root;\n" if os.geteuid() == 0 else ""
    temp_paths = "".join(
        f"    {kind}_temp_path {workdir / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return (
        f"{user}"
        "worker_processes 1;\n"
        f"pid {workdir / 'nginx.pid'};\n"
        f"error_log {workdir / 'error.log'} info;\n"
        "events {}\n"
        "http {\n"
        f"    access_log {workdir / 'access.log'};\n"
        f"{temp_paths}"
        f"    include {rendered};\n"
        "}\n"
    )


@contextmanager
def nginx(
    upstream: str, workdir: Path, *, variables: Mapping[str, str] | None = None
) -> Iterator[LiveService]:
    """nginx on a free port in front of ``upstream`` (host:port); stopped on exit.

    ``variables`` are the optional template variables to set.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    rendered = workdir / "order-service.conf"
    rendered.write_text(
        render_template(
            {
                "NGINX_LISTEN": f"127.0.0.1:{port}",
                "NGINX_UPSTREAM": upstream,
                **(variables or {}),
            }
        )
    )
    main = workdir / "nginx.conf"
    main.write_text(_main_config(workdir, rendered))
    command = [str(NGINX), "-p", f"{workdir}/", "-e", str(workdir / "error.log"), "-c", str(main)]
    check = subprocess.run([*command, "-t", "-q"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, f"nginx -t exited with status {check.returncode}: {check.stderr}"
    # Its own session, so that the master and its workers can be ended
    # together whatever state they are left in. Its own messages go to
    # error.log (-e); stdout.log has only what it says before it reads that.
    process = servers.start(
        "nginx",
        [*command, "-g", "daemon off;"],
        log=workdir / "stdout.log",
        other_logs=[workdir / "error.log"],
        start_new_session=True,
    )
    try:
        _wait_until_listening(port, process)
        yield LiveService(base_url=f"http://127.0.0.1:{port}")
    finally:
        # SIGTERM is nginx's fast shutdown: the master ends its workers first.
        servers.stop([process], within_s=10)
        # Any worker the master left behind.
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


def _wait_until_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    def listening() -> bool:
        assert process.poll() is None, f"nginx exited\n{servers.evidence()}"
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True

    # nginx signals nothing when it listens; the port opening is the sign.
    wait_until(listening, 10, interval=0.02, what=f"nginx listening on {port}", ignoring=(OSError,))


@contextmanager
def serve_behind_nginx(
    env: Mapping[str, str],
    workdir: Path,
    *,
    web_workers: int = 2,
    gunicorn_args: Sequence[str] = (),
) -> Iterator[tuple[LiveService, LiveService]]:
    """gunicorn (``tests.support.live.serve``) with nginx in front: yields (nginx, gunicorn)."""
    with serve(env, web_workers=web_workers, gunicorn_args=gunicorn_args) as app:
        upstream = app.base_url.removeprefix("http://")
        with nginx(upstream, workdir) as edge:
            yield edge, app


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


def raw_exchange(service: LiveService, request: bytes, *, timeout: float = 10) -> RawResponse:
    """Send ``request`` as it is; read one answer (up to its length, or the close)."""
    with socket.create_connection(service.address, timeout=timeout) as sock:
        # The server may answer and close before it has taken all of it.
        with suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(request)
        received = bytearray()
        while not _complete(received):
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    return parse_response(bytes(received))


def _complete(data: bytearray) -> bool:
    head, found, body = bytes(data).partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    return bool(found and length and len(body) >= int(length.group(1)))


def parse_response(data: bytes) -> RawResponse:
    """One HTTP/1.1 answer with a Content-Length (what error answers carry)."""
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    match = re.fullmatch(r"HTTP/1\.[01] (\d{3})( .*)?", status_line)
    assert match, f"not an HTTP answer: {data[:200]!r}"
    headers: dict[str, str] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        assert name.lower() not in headers, f"{name} sent twice"
        headers[name.lower()] = value.strip()
    length = int(headers.get("content-length", len(rest)))
    return RawResponse(status=int(match.group(1)), headers=headers, body=rest[:length])
