"""``plan-serve``: the planner over HTTP, a JSON API and a web page (``pip install 'plan-search[serve]'``).

Thin: read the options into :class:`planner.serve.limits.Limits`, start uvicorn on the Starlette
application of :mod:`planner.serve.app`. It listens on loopback (127.0.0.1) unless ``--host`` says
otherwise. Ctrl-C stops it.
"""

from __future__ import annotations

import click

from plan_search import __version__

from plan_search.cli.common import OneLineCommand, guarded


def views():
    """The commands' formatting the API answers with: plan-catalog's JSON records, plan-search's CSV."""
    from plan_search.cli.catalog import _gpu_record, _model_record
    from plan_search.cli.search import format_csv
    from plan_search.planner.serve.app import Views

    return Views(model_record=_model_record, gpu_record=_gpu_record, front_csv=format_csv)


class ServerThread:
    """``with ServerThread(limits) as url:`` plan-serve on 127.0.0.1 and an ephemeral port, in a thread
    of this process (its workers are processes), stopped, workers and all, when the block ends: the
    tests' and the benchmark's server."""

    def __init__(self, limits=None) -> None:
        from plan_search.planner.serve.limits import Limits

        self.limits = limits or Limits()
        self.server = None
        self.thread = None

    def __enter__(self) -> str:
        import threading
        import time

        import uvicorn

        from plan_search.planner.serve.app import create_app
        from plan_search.planner.serve.run import bind, config

        sock = bind("127.0.0.1", 0)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.server = uvicorn.Server(config(create_app(views(), self.limits)))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        t0 = time.monotonic()
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() - t0 > 120:
                self.__exit__()
                raise RuntimeError("plan-serve did not start")
            time.sleep(0.02)
        return url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)


@click.command(cls=OneLineCommand, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="plan-serve", message="%(prog)s %(version)s")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to listen on (loopback by default; 0.0.0.0 exposes it to the network)")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="0: any free port")
@click.option("--workers", type=click.IntRange(1, 64), default=None,
              help="worker processes running searches [default: 2]")
@click.option("--queue", type=click.IntRange(0, 1024), default=None,
              help="requests that may wait for a worker; one more is answered 503 at once [default: 2]")
@click.option("--max-time-limit", type=click.FloatRange(0, 86400, min_open=True), default=None,
              help="largest time_limit_s a request may ask (a sweep's scenarios share it) [default: 60]")
@click.option("--max-sweep", type=click.IntRange(1, 10000), default=None,
              help="most scenarios of one POST /v1/sweep [default: 16]")
@guarded
def main(host: str, port: int, workers, queue, max_time_limit, max_sweep) -> None:
    """Serve the JSON API (POST /v1/search, /v1/estimate, /v1/sweep; GET /v1/catalog/models|gpus,
    /v1/schema/NAME, /openapi.json, /v1/version, /v1/health) and the web page at /."""
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError:
        from plan_search.models.io import InputError

        raise InputError("plan-serve needs starlette and uvicorn: pip install 'plan-search[serve]'") from None
    from plan_search.planner.serve.app import create_app
    from plan_search.planner.serve.limits import Limits
    from plan_search.planner.serve.run import bind, config, is_loopback

    given = {"workers": workers, "queue": queue, "max_time_limit_s": max_time_limit, "max_sweep_scenarios": max_sweep}
    limits = Limits(**{k: v for k, v in given.items() if v is not None})
    try:
        sock = bind(host, port)
    except OSError as exc:
        from plan_search.models.io import InputError

        raise InputError(f"--host/--port: cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"plan-serve {__version__}: http://{shown}:{bound}/ ({limits.workers} workers, {limits.queue} waiting "
               f"at most, time limit {limits.max_time_limit_s:g} s); Ctrl-C stops it", err=True)
    if not is_loopback(host):
        click.echo(f"plan-serve: listening on {host}, not loopback: anyone who reaches this machine can use it",
                   err=True)
    server = uvicorn.Server(config(create_app(views(), limits)))
    server.run(sockets=[sock])


if __name__ == "__main__":  # pragma: no cover
    main()
