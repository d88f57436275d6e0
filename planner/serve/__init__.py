"""``plan-serve``: the planner over HTTP, a JSON API and a web page (``pip install 'plan-search[serve]'``).

- :mod:`.limits` — :class:`Limits`, the one description of what the server accepts and how much it
  runs at once (body size, GPU-count lists, sweep size, time limit, workers, queue).
- :mod:`.inputs` — an HTTP body read into the planner's own documents (:class:`SearchRequest`, the
  estimate's fields, a sweep document), models and GPUs taken from the catalogs or from the body
  (a pasted ``config.json``), never from a file.
- :mod:`.work` — what a worker process runs: :func:`plan_search.search`, :func:`plan_search.estimate`
  and :func:`planner.sweep.run_scenario`, the functions the commands call.
- :mod:`.openapi` — the OpenAPI document, written from the same JSON Schemas the commands publish.
- :mod:`.app` — the Starlette application: routes, admission (a full queue answers 503 at once), the
  worker pool, the page's files (``static/``).

Exit codes map to HTTP statuses: 0 -> 200, 2 (bad input) -> 422 (400 when the body is not a JSON
object; 413 when it is over the size limit), 3 (nothing feasible) -> 409.
"""
