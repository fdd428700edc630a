"""The live explorer (``attnflow app``): a local web page over the api.

Pick a model, type a text or a prompt (or upload an image), watch tokens appear as they are
generated, click any token to see what it drew on. The page is the HTML report of
``attnflow.views.report`` served live, plus the controls, streaming and progress around it.

- ``.catalog``: the models offered, each loaded once and shared by every page;
- ``.options``: what a page may ask for (methods, weightings, filters, limits), as tables;
- ``.jobs``: one request's work on a worker thread, with progress, cancel and streamed tokens;
- ``.tasks``: the api call each job makes (``explain_maps``, ``generate``, ``explain_image``);
- ``.server``: the Starlette routes, the security headers, and serving with uvicorn;
- ``static/``: the page (plain HTML, CSS and JavaScript; nothing is fetched from elsewhere).
"""
