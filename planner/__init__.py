"""The planner: the cost model (``costmodel``), the search (``search``), framework rules and
launch configurations (``frameworks``), sweeps, allocation, calibration, plots and the pandas API.

Layers, top to bottom (each imports only those below it; ``tests/test_layout.py`` checks it):
cli -> sweep / allocate / api / plots / calibration -> search -> frameworks -> costmodel ->
hardware, models. The public API is :mod:`plan_search` itself.
"""
