"""CP-SAT: the model (one named Boolean per candidate, exactly one chosen, the limits as named clauses,
the lexicographic objective as ordinal ranks: :func:`build_model`), its solver parameters in one place
(:func:`solver_parameters`), the front's epsilon-constraint walk (:func:`cpsat_front`) and one pick
(:func:`cpsat_pick`). OR-Tools is imported lazily (:func:`_cpsat`, :func:`preload_cp_model`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from plan_search.planner.search import clock
from plan_search.planner.search.objective import FRONT_KEY
from plan_search.planner.search.request import SearchRequest
from plan_search.planner.search.table import Table, positions

@functools.cache  # looked up once: build_model, solver_parameters and _solve each ask, on every solve
def _cpsat():
    """OR-Tools' CP-SAT without ``ortools.sat.python.cp_model``: that module imports pandas (~0.25 s
    of a 0.4 s import) for its DataFrame helpers, which the search does not use. The model is a
    CpModelProto built here and solved by the helper's SolveWrapper, the two things cp_model's
    CpModel and CpSolver wrap (the same proto, the same solver: the same answer). From OR-Tools
    9.15 the protos are the helper's own (pybind11) classes; before, the protobuf messages of
    ``cp_model_pb2``/``sat_parameters_pb2`` (same field names). Returns (model proto class,
    parameters class, SolveWrapper class, {"optimal", "feasible", "infeasible"} -> status)."""
    from ortools.sat.python import cp_model_helper as cmh

    if hasattr(cmh, "CpModelProto"):
        status = {k: getattr(cmh.CpSolverStatus, k.upper()) for k in ("optimal", "feasible", "infeasible")}
        return cmh.CpModelProto, cmh.SatParameters, cmh.SolveWrapper, status
    from ortools.sat import cp_model_pb2, sat_parameters_pb2

    status = {k: getattr(cp_model_pb2, k.upper()) for k in ("optimal", "feasible", "infeasible")}
    return cp_model_pb2.CpModelProto, sat_parameters_pb2.SatParameters, cmh.SolveWrapper, status


def solver_parameters(request: SearchRequest, time_left: float):
    """Every CP-SAT parameter of the search, in one place (a SatParameters)."""
    p = _cpsat()[1]()
    p.max_time_in_seconds = max(time_left, 1e-3)
    p.num_workers = request.solver_threads
    p.random_seed = request.seed
    p.log_search_progress = False
    p.catch_sigint_signal = False  # Ctrl-C stays Python's KeyboardInterrupt
    # The models are one exactly-one over a few dozen Booleans with a linear objective of distinct
    # ranks: presolve's probing and symmetry detection find nothing to use and cost ~40% of each
    # solve (GPT-3 175B's 67-solve walk: 17.4 -> 10.8 ms CPU); the optimum (unique) is unchanged.
    p.cp_model_probing_level = 0
    p.symmetry_level = 0
    return p


@dataclass
class Model:
    """A CP-SAT model over a :class:`Table` (see :func:`build_model`): its CpModelProto, whose
    variable ``i`` is the Boolean "row ``i`` is chosen"."""

    cp: object
    pos: np.ndarray
    order: np.ndarray  # order[p] = row whose objective coefficient is p

    def forbid(self, rows) -> None:
        """Constraint: none of ``rows`` is chosen (their Booleans' domains become {0}, so the
        model does not grow along the walk)."""
        variables = self.cp.variables
        for i in rows:
            variables[int(i)].domain[1] = 0

    def hint(self, row: int | None) -> None:
        if hasattr(self.cp, "clear_solution_hint"):  # OR-Tools 9.15+'s protos
            self.cp.clear_solution_hint()
        else:  # a protobuf message
            self.cp.ClearField("solution_hint")
        if row is not None:
            self.cp.solution_hint.vars.append(int(row))
            self.cp.solution_hint.values.append(1)


def build_model(t: Table, request: SearchRequest, labels: list[str], key: tuple[str, ...],
                node_sizes: np.ndarray) -> Model:
    """CP-SAT: choose exactly one candidate of ``t`` under the request's limits, minimising the
    lexicographic ``key`` (ordinal scaling, see the module docstring)."""
    m = _cpsat()[0]()
    m.name = "plan-search"
    for i in range(len(t)):
        v = m.variables.add()
        v.name = f"pick[{i}]:{labels[int(t.system[i])]}x{int(t.gpus[i])}#{int(t.row[i])}"
        v.domain.extend((0, 1))
    m.constraints.add().exactly_one.literals.extend(range(len(t)))

    # Limits on the chosen candidate. With exactly one Boolean true, "attribute of the choice
    # <= limit" is exactly "no candidate over the limit is chosen": stated that way (one named
    # clause per limit: the negations of the Booleans over it) rather than as a weighted sum, whose
    # presolve costs ~8 ms per solve on a few hundred distinct coefficients against ~0.5 ms for the
    # whole model.
    nodes = -(-t.gpus // node_sizes[t.system])
    limits = (
        ("deadline", t.days, request.deadline_days, 1),
        ("budget", t.cost, request.budget_usd, 1),
        ("power_cap", t.power, request.max_power_kw, 1),
        ("max_gpus", t.gpus, request.max_gpus, 1),
        ("max_nodes", nodes, request.max_nodes, 1),
        ("min_gpus", t.gpus, request.min_gpus, -1),
    )
    for name, col, limit, sign in limits:
        if limit is None:
            continue
        over = np.nonzero(col > limit if sign > 0 else col < limit)[0]
        c = m.constraints.add()
        c.name = name
        if hasattr(c.bool_and, "SetInParent"):  # a protobuf message: an empty list still sets the field
            c.bool_and.SetInParent()
        c.bool_and.literals.extend((-over - 1).tolist())  # literal -i-1: "not variable i"
    pos = positions(t, key)
    # objective sum(pos[i] * pick[i]); a zero coefficient is left out, as cp_model writes it
    nz = np.nonzero(pos)[0]
    m.objective.vars.extend(nz.tolist())
    m.objective.coeffs.extend(pos[nz].tolist())
    m.objective.scaling_factor = 1.0
    order = np.empty(len(t), dtype=np.int64)
    order[pos] = np.arange(len(t))
    return Model(m, pos, order)


def _solve(model: Model, request: SearchRequest, deadline: float) -> tuple[str, int | None]:
    """Solve; (status, chosen row)."""
    _, _, solve_wrapper, status = _cpsat()
    w = solve_wrapper()
    w.set_parameters(solver_parameters(request, deadline - clock.now()))
    r = w.solve(model.cp)
    if r.status in (status["optimal"], status["feasible"]):
        row = int(model.order[int(round(r.objective_value))])
        return ("optimal" if r.status == status["optimal"] else "feasible"), row
    if r.status == status["infeasible"]:
        return "infeasible", None
    return "unknown", None


def weakly_dominated_by(t: Table, q: int) -> np.ndarray:
    """Rows with GPUs >= q's, days >= q's and dollars >= q's (q included)."""
    return np.nonzero((t.gpus >= t.gpus[q]) & (t.days >= t.days[q]) & (t.cost >= t.cost[q]))[0]


def cpsat_front(t: Table, request: SearchRequest, labels, node_sizes, deadline: float) -> tuple[list[int], bool, int]:
    """Front rows of ``t`` by epsilon-constraint re-solves; (rows, proven, solves)."""
    if not len(t):
        return [], True, 0
    model = build_model(t, request, labels, FRONT_KEY, node_sizes)
    allowed = np.ones(len(t), dtype=bool)
    front: list[int] = []
    solves = 0
    proven = True
    while True:
        if clock.now() >= deadline:
            proven = False
            break
        model.hint(front[-1] if front else None)
        status, row = _solve(model, request, deadline)
        solves += 1
        if status == "infeasible":
            break
        if status != "optimal":
            proven = False
            break
        front.append(row)
        dom = weakly_dominated_by(t, row)
        model.forbid(dom[allowed[dom]])
        allowed[dom] = False
    return front, proven, solves


def cpsat_pick(t: Table, request: SearchRequest, labels, key, node_sizes, deadline: float) -> tuple[int | None, bool]:
    model = build_model(t, request, labels, key, node_sizes)
    status, row = _solve(model, request, deadline)
    return row, status in ("optimal", "infeasible")


def _import_cp_model() -> None:
    try:
        _cpsat()
    except Exception:  # noqa: BLE001  (the solve imports it again and reports the error)
        pass


def preload_cp_model() -> None:
    """Import OR-Tools' CP-SAT (:func:`_cpsat`) in a background thread while the candidates are
    enumerated and priced. The solve's own import finds the module loaded (or waits for the thread:
    one module lock). A no-op once it is loaded. Called by the ``plan-search`` command, a process that
    never forks (a fork while the thread holds an import lock would leave the child waiting on it: the
    API's :func:`search` starts no thread)."""
    import sys
    import threading

    if "ortools.sat.python.cp_model_helper" not in sys.modules:
        threading.Thread(target=_import_cp_model, name="import-cp-sat", daemon=True).start()
