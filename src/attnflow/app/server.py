"""The app's HTTP side: a small Starlette application served by uvicorn.

Routes (all under the page's own origin; the page fetches nothing else):

    GET  /                         the page (static/index.html, app.js, app.css)
    GET  /api/models               the model list;   POST /api/models {"path"} adds a local folder
    GET  /api/options              methods, weightings, filters and limits the page offers
    POST /api/jobs                 start an explanation or a generation -> {"id"}
    GET  /api/jobs/{id}            the job's state;  GET /api/jobs/{id}/events streams it (server-sent events)
    POST /api/jobs/{id}/cancel     stop it
    GET  /api/jobs/{id}/report.html   the result's self-contained report (the views' own page)
    GET  /api/jobs/{id}/result.json   the result's JSON (?download=1 for both: as a file; ?preview=1
                                   for both: the first look, flow for the explained target alone,
                                   streamed as a "preview" event while flow for the others runs)
    GET  /api/jobs/{id}/top        a generated token's top prompt tokens (Attribution.top)

Every response carries a Content-Security-Policy that allows this origin only (the report: nothing
at all, as in a saved report), bad input answers 400 with ``{"error": one line}``, and requests whose
Host header names another machine are refused while the server listens on loopback (so that a web
page elsewhere cannot reach it by DNS rebinding). Job-starting requests must be JSON, which a page
of another origin cannot send without the browser asking first (and this server never agrees).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from attnflow.app import options, tasks
from attnflow.app.catalog import Catalog
from attnflow.app.jobs import TERMINAL, Job, JobStore
from attnflow.errors import AttnflowError

PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
               "frame-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
REPORT_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
                 "form-action 'none'; base-uri 'none'; frame-ancestors 'self'")
MAX_BODY = options.MAX_IMAGE_BYTES * 4 // 3 + 64 * 1024
STATIC = {"app.js": "text/javascript", "app.css": "text/css"}
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _static(name: str) -> str:
    return resources.files("attnflow.app").joinpath("static", name).read_text(encoding="utf-8")


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _json_body(request: Request) -> dict[str, Any]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise AttnflowError("send the request as application/json")
    size = 0
    chunks = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise AttnflowError(f"the request is larger than {MAX_BODY // 2**20} MB")
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except ValueError as exc:
        raise AttnflowError("the request is not valid JSON") from exc
    if not isinstance(body, dict):
        raise AttnflowError("the request must be a JSON object")
    return body


def _sse(event: str, data: Any, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def _catalog(request: Request) -> Catalog:
    return request.app.state.catalog


def _store(request: Request) -> JobStore:
    return request.app.state.store


def _job_of(request: Request) -> Job:
    job = _store(request).get(request.path_params["job"])
    if job is None:
        raise AttnflowError("no such job on this server (it may have been replaced by newer ones)")
    return job


def _finished(request: Request) -> Job:
    job = _job_of(request)
    if job.state != "done":
        raise AttnflowError(f"the job is {job.state}; it has no result")
    return job


def _shown(request: Request) -> tuple[Job, Any, bool]:
    """The job, and the result a report or JSON request asks for: ``?preview=1`` the first look (flow
    for the explained target alone; there while the rest runs, and after a cancel), else the result."""
    if not request.query_params.get("preview"):
        job = _finished(request)
        return job, job.result, False
    job = _job_of(request)
    if job.preview is None:
        raise AttnflowError(f"the job is {job.state}; it has no first look")
    return job, job.preview, True


async def page(request: Request) -> Response:
    return Response(_static("index.html"), media_type="text/html; charset=utf-8")


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        return _error("not found", 404)
    return Response(_static(name), media_type=f"{STATIC[name]}; charset=utf-8")


async def models(request: Request) -> Response:
    if request.method == "POST":
        body = await _json_body(request)
        entry = await run_in_threadpool(_catalog(request).add_folder, body.get("path"))
        return JSONResponse({"model": entry.describe(), "models": _catalog(request).entries()})
    return JSONResponse({"models": _catalog(request).entries(), "allow_paths": _catalog(request).allow_paths})


async def option_tables(request: Request) -> Response:
    return JSONResponse(options.tables())


async def start(request: Request) -> Response:
    body = await _json_body(request)
    catalog = _catalog(request)
    entry = catalog.entry(body.get("model"))
    if entry.kind == "text":
        wanted = options.text_request(body, entry.classifier)
        run = tasks.explain_text
    elif entry.kind == "decoder":
        wanted = options.generate_request(body)
        run = tasks.generate_text
    else:
        wanted = await run_in_threadpool(options.image_request, body, entry.classifier)
        run = tasks.explain_picture
    job = _store(request).submit(Job(entry.kind, entry.key),
                                 lambda job: run(job, catalog.get(entry.key, status=job.say)[1], wanted))
    return JSONResponse({"id": job.id}, status_code=201)


async def state(request: Request) -> Response:
    return JSONResponse(_job_of(request).snapshot())


async def cancel(request: Request) -> Response:
    job = _job_of(request)
    job.cancel()
    return JSONResponse({"id": job.id, "cancelled": True})


async def events(request: Request) -> Response:
    job = _job_of(request)
    try:
        sent = int(request.headers.get("last-event-id") or 0)  # a reconnecting page resumes its tokens
    except ValueError:
        sent = 0

    async def stream() -> Any:
        nonlocal sent
        version, status, progress, previewed = -1, None, None, False
        while True:
            job.seen()
            if not previewed and job.preview_due():
                previewed = True
                yield _sse("preview", _summary(job.preview))
            snap = job.snapshot()
            if snap["version"] != version:
                version = snap["version"]
                for i in range(sent, len(snap["tokens"])):
                    yield _sse("token", {"index": i, "token": snap["tokens"][i]}, i + 1)
                sent = len(snap["tokens"])
                if snap["status"] != status:
                    status = snap["status"]
                    yield _sse("status", {"state": snap["state"], "status": status})
                if snap["progress"] != progress and snap["progress"] is not None:
                    progress = snap["progress"]
                    yield _sse("progress", progress)
                if snap["state"] == "done":
                    yield _sse("done", _summary(job.result))
                    return
                if snap["state"] in TERMINAL:  # "failed", not "error": EventSource fires its own "error"
                    yield _sse("failed" if snap["state"] == "error" else "cancelled", {"error": snap["error"]})
                    return
            await asyncio.sleep(0.05)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _attachment(request: Request, name: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}"'} if request.query_params.get("download") else {}


async def result_json(request: Request) -> Response:
    job, result, _ = _shown(request)
    text = await run_in_threadpool(result.to_json)
    return Response(text, media_type="application/json",
                    headers=_attachment(request, f"attnflow-{result.kind}.json"))


async def report(request: Request) -> Response:
    job, result, preview = _shown(request)
    text = await run_in_threadpool(job.report, preview)
    return Response(text, media_type="text/html; charset=utf-8",
                    headers={"Content-Security-Policy": REPORT_POLICY, "X-Frame-Options": "SAMEORIGIN",
                             **_attachment(request, f"attnflow-{result.kind}.html")})


async def top(request: Request) -> Response:
    result = _finished(request).result
    q = request.query_params
    try:
        target = int(q.get("target", result.target))
        k = result.input_length if q.get("k", "10") == "all" else int(q.get("k", "10"))
        layer = q.get("layer", "mean")
        layer = layer if layer == "mean" else int(layer)
    except ValueError as exc:
        raise AttnflowError("target, k and layer must be whole numbers (layer may be 'mean')") from exc
    if k < 1:
        raise AttnflowError(f"k must be at least 1; got {k}")
    filters = [f for f in q.get("filters", "").split(",") if f]
    ranked = result.top(k, target=target, layer=layer, **options.top_options(filters))
    t = result.target_index(target)
    return JSONResponse({"target": t, "token": result.targets[t], "layer": layer, "filters": filters,
                         "top": [[p, token, score] for p, token, score in ranked]})


def guarded(handler: Any) -> Any:
    """The handler, answering a refusal (``AttnflowError``) with 400 and its one line."""

    async def call(request: Request) -> Response:
        try:
            return await handler(request)
        except AttnflowError as exc:
            return _error(str(exc))

    return call


ROUTES = [Route("/", page), Route("/static/{name}", static),
          Route("/api/models", guarded(models), methods=["GET", "POST"]),
          Route("/api/options", option_tables),
          Route("/api/jobs", guarded(start), methods=["POST"]),
          Route("/api/jobs/{job}", guarded(state)),
          Route("/api/jobs/{job}/events", guarded(events)),
          Route("/api/jobs/{job}/cancel", guarded(cancel), methods=["POST"]),
          Route("/api/jobs/{job}/result.json", guarded(result_json)),
          Route("/api/jobs/{job}/report.html", guarded(report)),
          Route("/api/jobs/{job}/top", guarded(top))]


@contextlib.asynccontextmanager
async def _lifespan(app: Any) -> Any:
    yield
    app.state.store.shutdown()


def create_app(catalog: Catalog, store: JobStore, *, loopback: bool = True) -> Any:
    """The ASGI application (``uvicorn.run(create_app(Catalog(), JobStore()))`` serves it): the routes
    above, with ``catalog`` and ``store`` in the application's state, behind the security guard."""
    app = Starlette(routes=ROUTES, lifespan=_lifespan)
    app.state.catalog, app.state.store = catalog, store
    return _Guard(app, loopback)


def _summary(r: Any) -> dict[str, Any]:
    return {"kind": r.kind, "methods": r.methods, "targets": r.targets, "prediction": r.prediction,
            "input_length": r.input_length, "n_layers": r.n_layers, "target": r.target}


class _Guard:
    """ASGI middleware: security headers on every response; on loopback, only loopback Host names."""

    HEADERS = {"content-security-policy": PAGE_POLICY, "x-content-type-options": "nosniff",
               "referrer-policy": "no-referrer", "x-frame-options": "DENY", "cache-control": "no-store"}

    def __init__(self, app: Any, loopback: bool) -> None:
        self.app, self.loopback = app, loopback

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.loopback and not self._local_host(scope):
            response = _error("this server answers requests for localhost / 127.0.0.1 only", 421)
            return await response(scope, receive, send)

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for key, value in self.HEADERS.items():
                    headers.setdefault(key, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)

    @staticmethod
    def _local_host(scope: Any) -> bool:
        host = dict(scope.get("headers") or []).get(b"host", b"").decode("latin-1").strip().lower()
        if host.startswith("["):
            name = host[1: host.find("]")] if "]" in host else host
        else:
            name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
        return name in LOOPBACK_NAMES or is_loopback(name)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: a free one), or a one-line error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise AttnflowError(f"cannot listen on {host!r}: {exc.strerror or exc}") from exc
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise AttnflowError(f"cannot listen on {host} port {port}: {exc.strerror or exc} "
                            "(choose another with --port; 0 picks a free one)") from exc
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def serve(catalog: Catalog, sock: socket.socket, *, workers: int = 4) -> None:
    """Serve the app on ``sock`` until Ctrl-C or SIGTERM; running jobs are cancelled on the way out."""
    import uvicorn

    store = JobStore(workers=workers)
    app = create_app(catalog, store, loopback=is_loopback(sock.getsockname()[0]))

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            store.cancel_all()  # long flows and generations stop, so their streams end and exit is quick
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=3,
                            lifespan="on")
    Server(config).run(sockets=[sock])
