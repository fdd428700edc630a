"""``attnflow app``: the live explorer in the browser (a local web server; see docs/app.md)."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from attnflow.cli.app import app
from attnflow.cli.options import device_option
from attnflow.errors import AttnflowError


@app.command("app")
def serve_app(
    model: Optional[list[str]] = typer.Option(
        None, "--model", "-m", metavar="FOLDER_OR_NAME",
        help="A model to list first: a local model folder, or a listed name (agreement, digits_vit, smollm2, "
             "minilm). Repeat for several. Others stay listed. Default: every listed model, the bundled "
             "agreement model first."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on. Anything but loopback lets other machines "
                                               "use the app (no login): a warning is printed."),
    port: int = typer.Option(8501, min=0, max=65535, help="Port to listen on (0 picks a free one)."),
    allow_paths: Optional[bool] = typer.Option(
        None, "--allow-paths/--no-allow-paths", help="Let pages type a local model folder to load. Default: "
                                                     "allowed on loopback, refused otherwise."),
    device: str = device_option(),
    workers: int = typer.Option(4, min=1, max=64, help="Jobs that may run at once (more wait their turn)."),
    threads: Optional[int] = typer.Option(None, min=1, help="CPU threads for torch and the flow engine "
                                                            "(default: theirs)."),
) -> None:
    """Serve the live explorer: pick a model, type a text or a prompt (or upload an image), watch it
    generate, click any token to see what it drew on. Models load once and are shared by every page.

        attnflow app                          # http://127.0.0.1:8501/
        attnflow app --model smollm2 --port 8600
    """
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise AttnflowError(f"the app needs starlette and uvicorn ({exc.name} is missing): "
                            "pip install 'attnflow[app]'") from exc
    from attnflow.api.devices import pick_device
    from attnflow.api.models import quiet_transformers
    from attnflow.app.catalog import Catalog
    from attnflow.app.server import bind, is_loopback, serve, url_of

    local = is_loopback(host)
    catalog = Catalog(list(model or []), allow_paths=local if allow_paths is None else allow_paths,
                      device=pick_device(device))  # refused here, before the port is bound, on a CPU-only torch
    sock = bind(host, port)
    if threads is not None:
        import numba
        import torch

        torch.set_num_threads(threads)
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    quiet_transformers()
    if not local:
        print(f"attnflow: warning: listening on {host}: anyone who can reach this machine on port "
              f"{sock.getsockname()[1]} can use the app and its models (no login, no encryption)"
              + ("; typed model folders are refused (--allow-paths allows them)" if not catalog.allow_paths else ""),
              file=sys.stderr, flush=True)
    print(f"attnflow app: serving on {url_of(sock)} (Ctrl-C stops it)", flush=True)
    serve(catalog, sock, workers=workers)
