"""plan-allocate: CP-SAT against brute force over every combination (synthetic and real options,
every objective, with and without leaving jobs out), options = plan-search's per-type fronts,
deadlines and their reasons, nodes, scaling and overflow, determinism, the CLI."""

from __future__ import annotations

import json
import math
import random
from itertools import product

import pytest
from click.testing import CliRunner

from plan_search.cli.allocate import main
from plan_search.planner.allocate import (
    DAYS_QUANTUM,
    OBJECTIVES,
    SCALE_BITS,
    AllocationInfeasible,
    AllocationResult,
    Job,
    Jobs,
    Option,
    Pool,
    Problem,
    TypeCap,
    allocate,
    build_problem,
    greedy,
    integer_terms,
    make_entry,
    solve,
    tiers_of,
)
from plan_search.planner.search.request import SearchRequest
from plan_search.planner.search.front import search

# ------------------------------------------------------------------ the oracle


def brute_force(problem: Problem, objective: str, allow_unscheduled: bool):
    """Every combination of one option per job (or none, if allowed): the lexicographic minimum
    of the integer tiers, and the minimum of the primary objective in floats among the
    combinations that leave out the least weight. None when nothing is feasible."""
    terms = integer_terms(problem)
    tiers = tiers_of(objective, allow_unscheduled)
    jobs = problem.jobs
    choices = [list(range(len(j.options))) + ([None] if allow_unscheduled or not j.options else [])
               for j in jobs]
    best, best_float_by_left = None, {}
    for combo in product(*choices):
        use = {n: [0, 0] for n in problem.types}
        for j, k in enumerate(combo):
            if k is not None:
                o = jobs[j].options[k]
                use[o.gpu][0] += o.num_gpus
                use[o.gpu][1] += o.nodes
        if any((c.gpus is not None and use[n][0] > c.gpus) or (c.nodes is not None and use[n][1] > c.nodes)
               for n, c in problem.types.items()):
            continue
        ints = {
            "unscheduled": sum(terms.weight[j] for j, k in enumerate(combo) if k is None and jobs[j].options),
            "weighted_days": sum(terms.weighted_days[j][k] for j, k in enumerate(combo) if k is not None),
            "cost": sum(terms.cost[j][k] for j, k in enumerate(combo) if k is not None),
            "makespan": max((terms.makespan[j][k] for j, k in enumerate(combo) if k is not None), default=0),
        }
        key = tuple(ints[t] for t in tiers)
        if best is None or key < best:
            best = key
        chosen = [(jobs[j], jobs[j].options[k]) for j, k in enumerate(combo) if k is not None]
        floats = {
            "weighted-completion": sum(j.weight * o.days for j, o in chosen),
            "cost": sum(o.cost_usd for _, o in chosen),
            "makespan": max((o.days for _, o in chosen), default=0.0),
        }
        left = ints["unscheduled"]
        best_float_by_left[left] = min(best_float_by_left.get(left, math.inf), floats[objective])
    if best is None or not any(j.options for j in jobs):
        return None, None
    left_min = best[0] if allow_unscheduled else 0
    return best, best_float_by_left[left_min]


def primary_total(res: AllocationResult) -> float:
    return {"weighted-completion": res.totals.weighted_completion_days, "cost": res.totals.cost_usd,
            "makespan": res.totals.makespan_days}[res.objective]


def check_against_brute_force(problem, objective, allow_unscheduled):
    best, best_float = brute_force(problem, objective, allow_unscheduled)
    if best is None:
        with pytest.raises(AllocationInfeasible):
            solve(problem, objective, allow_unscheduled=allow_unscheduled)
        return None
    res = solve(problem, objective, allow_unscheduled=allow_unscheduled)
    assert res.solver.status == "optimal" and res.solver.proven_optimal
    assert tuple(res.solver.tier_values) == best, (objective, allow_unscheduled)
    # the primary objective in floats: identical up to the stated rounding (jobs x q / 2)
    q = integer_terms(problem).quanta["weighted_days" if objective == "weighted-completion" else "cost"]
    tol = 0.0 if objective == "makespan" else len(problem.jobs) * q
    assert abs(primary_total(res) - best_float) <= tol
    # the reported allocation respects the pool
    for u in res.pool:
        cap = problem.types[u.gpu]
        assert cap.gpus is None or u.gpus_used <= cap.gpus
        assert cap.nodes is None or u.nodes_used <= cap.nodes
    return res


def random_problem(rng: random.Random) -> Problem:
    types = {
        "a": TypeCap("a", 8, rng.choice([16, 24, 32, 40, 48]), rng.choice([None, None, 3, 4, 5])),
        "b": TypeCap("b", 4, rng.choice([None, 8, 12, 16, 24]), rng.choice([None, 2, 3, 4])),
    }
    if types["b"].gpus is None and types["b"].nodes is None:
        types["b"].gpus = 8
    jobs = []
    for j in range(rng.choice([2, 3])):
        opts = []
        for g in rng.sample(["a", "b"], rng.choice([1, 2])):
            gpn = types[g].gpus_per_node
            for n in sorted(rng.sample([4, 8, 12, 16, 24, 32], rng.choice([1, 2, 3]))):
                days = rng.uniform(1, 60) * 16 / n
                opts.append(Option(gpu=g, num_gpus=n, nodes=-(-n // gpn), days=days,
                                   cost_usd=days * n * 24 * rng.uniform(1.5, 4.0)))
        deadline = rng.choice([None, None, 30.0, 60.0])
        jobs.append(make_entry(f"job{j}", rng.choice([1.0, 2.0, 0.5, 3.25]), deadline, opts))
    return Problem(types=types, jobs=jobs)


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("allow_unscheduled", [False, True])
def test_cpsat_equals_brute_force_on_random_small_pools(objective, allow_unscheduled):
    rng = random.Random(f"{objective}-{allow_unscheduled}")
    solved = infeasible = left_out = 0
    for _ in range(100):
        problem = random_problem(rng)
        res = check_against_brute_force(problem, objective, allow_unscheduled)
        if res is None:
            infeasible += 1
            # leaving jobs out is always feasible, unless no job has any option at all
            assert not allow_unscheduled or not any(j.options for j in problem.jobs)
        else:
            solved += 1
            left_out += res.totals.unscheduled > sum(not j.options for j in problem.jobs)
    assert solved >= 40  # the instances exercise the solver, not only the infeasible path
    assert (infeasible >= 10) if not allow_unscheduled else (left_out >= 10)


def test_ties_and_equal_days_share_a_makespan_rank():
    opts = [Option("a", 8, 1, 5.0, 100.0), Option("a", 16, 2, 5.0, 90.0), Option("a", 4, 1, 7.0, 50.0)]
    problem = Problem(types={"a": TypeCap("a", 8, 16, None)},
                      jobs=[make_entry("x", 1.0, None, opts), make_entry("y", 1.0, None, opts[:1] + opts[2:])])
    assert integer_terms(problem).makespan == [[1, 1, 2], [1, 2]]
    for objective in OBJECTIVES:
        check_against_brute_force(problem, objective, False)


# ------------------------------------------------------------------ real options (plan-search's fronts)
POOL = {"free": {"h100-sxm": 32, "a100-80gb": {"nodes": 3}}}
JOBS = [
    {"name": "chat-8b", "model": "llama3.1-8b", "tokens": "50B", "weight": 2, "max_gpus": 24},
    {"name": "code-8b", "model": "llama3.1-8b", "tokens": 80e9, "global_batch": 512, "seq_len": 8192,
     "max_gpus": 24},
    {"name": "small-7b", "model": "llama2-7b", "tokens": "30B", "priority": 3, "max_gpus": 16},
]


@pytest.fixture(scope="module")
def real_problem():
    return build_problem(Pool.model_validate(POOL), Jobs.model_validate({"jobs": JOBS}))


def test_options_are_the_per_type_fronts_of_plan_search(real_problem):
    job = real_problem.jobs[1]
    for gpu, cap in (("h100-sxm", 24), ("a100-80gb", 24)):
        res = search(SearchRequest(model="llama3.1-8b", gpu=[gpu], tokens=80e9, global_batch=[512], seq_len=8192,
                                   max_gpus=cap, max_nodes=3 if gpu == "a100-80gb" else None))
        mine = [(o.num_gpus, o.days, o.cost_usd, o.plan) for o in job.options if o.gpu == gpu]
        assert mine == [(p.num_gpus, p.days, p.cost_usd, p.plan) for p in res.front]
        assert len(mine) >= 2
    assert all(o.nodes == -(-o.num_gpus // 8) for o in job.options)
    assert sum(len(j.options) for j in real_problem.jobs) >= 8


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("allow_unscheduled", [False, True])
def test_cpsat_equals_brute_force_on_real_fronts(real_problem, objective, allow_unscheduled):
    res = check_against_brute_force(real_problem, objective, allow_unscheduled)
    assert res is not None and res.totals.scheduled == 3
    for a in res.assignments:
        assert a.plan is not None and a.plan.num_gpus == a.num_gpus


def test_real_fronts_with_a_pool_too_small_for_all(real_problem):
    tight = Problem(types={"h100-sxm": TypeCap("h100-sxm", 8, 16, None), "a100-80gb": TypeCap("a100-80gb", 8, 8, None)},
                    jobs=[make_entry(j.name, j.weight, j.deadline_days,
                                     [o for o in j.options if o.num_gpus <= 16]) for j in real_problem.jobs])
    for objective in OBJECTIVES:
        assert check_against_brute_force(tight, objective, False) is not None  # 8 + 8 + 8 fits
    tighter = Problem(types={"h100-sxm": TypeCap("h100-sxm", 8, 8, None), "a100-80gb": TypeCap("a100-80gb", 8, 8, None)},
                      jobs=tight.jobs)
    with pytest.raises(AllocationInfeasible, match="cannot run all 3 jobs at once.*24 GPUs together against 16"):
        solve(tighter, "cost")
    for objective in OBJECTIVES:
        res = check_against_brute_force(tighter, objective, True)
        assert res.totals.scheduled == 2
        # the least weight is left out: code-8b (weight 1), not chat-8b (2) or small-7b (3)
        assert [u.job for u in res.unscheduled] == ["code-8b"]
        assert "left out: the pool cannot run it alongside the jobs scheduled" in res.unscheduled[0].reason


def test_allocate_end_to_end_meets_the_pool_and_the_objectives(real_problem):
    results = {o: allocate(POOL, JOBS, objective=o) for o in OBJECTIVES}
    for o, res in results.items():
        assert res.solver.proven_optimal
        used = {u.gpu: u for u in res.pool}
        assert used["h100-sxm"].gpus_used <= 32 and used["a100-80gb"].nodes_used <= 3
    wc = {o: r.totals.weighted_completion_days for o, r in results.items()}
    cost = {o: r.totals.cost_usd for o, r in results.items()}
    span = {o: r.totals.makespan_days for o, r in results.items()}
    assert wc["weighted-completion"] <= min(wc.values()) + 1e-9
    assert cost["cost"] <= min(cost.values()) + 1e-6
    assert span["makespan"] <= min(span.values())
    # the same options as build_problem (the same searches)
    assert results["cost"].solver.options == sum(len(j.options) for j in real_problem.jobs)


# ------------------------------------------------------------------ deadlines and reasons
def test_deadline_excludes_late_options_and_reports_the_fastest():
    pool = {"free": {"h100-sxm": 32}}
    jobs = [{"name": "tight", "model": "llama3.1-8b", "tokens": "100B", "deadline_days": 5},
            {"name": "hopeless", "model": "llama3.1-8b", "tokens": "1T", "deadline_days": 5}]
    res = allocate(pool, jobs)
    (a,) = res.assignments
    assert a.job == "tight" and a.days <= 5 and a.num_gpus == 32
    (u,) = res.unscheduled
    assert u.job == "hopeless" and u.fastest_days > 5 and u.fastest_num_gpus == 32
    assert u.reason.startswith("misses its deadline: its fastest option in the pool takes")
    assert f"{u.fastest_days:.2f} days (32 x h100-sxm) against a deadline of 5 days" in u.reason


def test_no_type_allowed_fits_names_each_type():
    pool = {"free": {"a100-40gb": 16, "h100-sxm": 8}}
    jobs = [{"name": "huge", "model": "gpt3-175b", "tokens": "300B", "gpu": ["a100-40gb", "h200"],
             "search": {"knobs": {"zero": [0], "recompute": ["none"]}}},
            {"name": "ok", "model": "llama2-7b", "tokens": "10B", "gpu": "h100"}]
    res = allocate(pool, jobs)
    assert [a.job for a in res.assignments] == ["ok"]
    (u,) = res.unscheduled
    assert u.reason.startswith("no type allowed has a plan that fits (")
    assert "h200: not in the pool" in u.reason and "a100-40gb: no plan fits in memory" in u.reason
    assert u.fastest_days is None


def test_nothing_feasible_raises():
    with pytest.raises(AllocationInfeasible, match="no job has an option: huge: no type allowed"):
        allocate({"free": {"a100-40gb": 8}}, [{"name": "huge", "model": "gpt3-175b", "tokens": 1e9}])


def test_equal_searches_run_once(monkeypatch):
    import sys

    mod = sys.modules["plan_search.planner.search.front"]
    calls = []
    real = mod.search

    def counting(req, **kw):
        calls.append(req)
        return real(req, **kw)

    monkeypatch.setattr(mod, "search", counting)
    jobs = [{"name": f"twin{i}", "model": "llama2-7b", "tokens": "10B", "weight": i + 1} for i in range(3)]
    res = allocate({"free": {"h100-sxm": 48}}, jobs)
    assert len(calls) == 1 and res.totals.scheduled == 3


# ------------------------------------------------------------------ nodes, scaling, determinism
def test_nodes_are_not_shared():
    # two jobs of 4 GPUs each on 8-GPU nodes: 8 GPUs free in total, but only 1 whole node
    opts = [Option("a", 4, 1, 10.0, 100.0)]
    problem = Problem(types={"a": TypeCap("a", 8, None, 1)},
                      jobs=[make_entry("x", 1.0, None, opts), make_entry("y", 1.0, None, opts)])
    with pytest.raises(AllocationInfeasible):
        solve(problem, "cost")
    problem.types["a"] = TypeCap("a", 8, None, 2)
    res = solve(problem, "cost")
    assert res.totals.scheduled == 2 and res.pool[0].nodes_used == 2


def test_pool_smaller_than_a_node_searches_every_count():
    res = allocate({"free": {"h100-sxm": 4}}, [{"name": "x", "model": "llama2-7b", "tokens": "1B"}])
    (a,) = res.assignments
    assert a.num_gpus <= 4 and a.nodes == 1


def test_huge_values_do_not_overflow():
    opts = [Option("a", 8, 1, 3e9, 7e15), Option("a", 16, 2, 1.6e9, 8e15)]
    problem = Problem(types={"a": TypeCap("a", 8, 24, None)},
                      jobs=[make_entry(f"j{i}", 1e6, None, opts) for i in range(3)])
    terms = integer_terms(problem)
    for name in ("weighted_days", "cost"):
        worst = sum(max(row) for row in getattr(terms, name))
        assert worst <= 2 ** SCALE_BITS + len(problem.jobs)
    assert terms.quanta["weighted_days"] > DAYS_QUANTUM
    for objective in OBJECTIVES:
        check_against_brute_force(problem, objective, True)


def _large(n_jobs: int, seed: int = 1) -> Problem:
    rng = random.Random(seed)
    types = {"a": TypeCap("a", 8, 16 * n_jobs // 2, None), "b": TypeCap("b", 8, None, n_jobs)}
    jobs = []
    for j in range(n_jobs):
        base, opts = rng.uniform(50, 500), []
        for g in ("a", "b"):
            for n in range(8, 257, 8):
                d = base * 8 / n * (1 + n / 2000) * (1.3 if g == "b" else 1.0)
                opts.append(Option(g, n, n // 8, d, d * n * 24 * (2.99 if g == "a" else 1.75)))
        jobs.append(make_entry(f"j{j}", rng.choice([1.0, 2.0, 3.0]), None, opts))
    return Problem(types=types, jobs=jobs)


def _int_value(problem, choice, tier):
    t = integer_terms(problem)
    rows = [(j, k) for j, k in enumerate(choice) if k is not None]
    if tier == "makespan":
        return max((t.makespan[j][k] for j, k in rows), default=0)
    return sum(getattr(t, tier)[j][k] for j, k in rows)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_larger_pool_is_solved_to_optimality_and_beats_greedy(objective):
    problem = _large(24)
    res = solve(problem, objective, allow_unscheduled=True, time_limit_s=60)
    assert res.solver.proven_optimal and res.totals.scheduled == 24
    tiers = tiers_of(objective, True)
    terms = integer_terms(problem)
    start = greedy(problem, terms, tiers)
    left = sum(terms.weight[j] for j, k in enumerate(start) if k is None)
    assert tuple(res.solver.tier_values[:2]) <= (left, _int_value(problem, start, tiers[1]))


def test_time_limit_returns_the_best_found_flagged_not_proven():
    problem = _large(60)
    res = solve(problem, "makespan", allow_unscheduled=True, time_limit_s=0.001)
    assert not res.solver.proven_optimal and res.solver.status in ("feasible", "greedy")
    for u in res.pool:
        cap = problem.types[u.gpu]
        assert (cap.gpus is None or u.gpus_used <= cap.gpus) and (cap.nodes is None or u.nodes_used <= cap.nodes)
    try:
        res = solve(problem, "cost", time_limit_s=0.001)
        assert not res.solver.proven_optimal
    except AllocationInfeasible as exc:
        assert "time limit" in str(exc)


def test_deterministic(real_problem):
    a = solve(real_problem, "makespan", allow_unscheduled=True)
    b = solve(real_problem, "makespan", allow_unscheduled=True)
    strip = lambda r: r.model_dump(exclude={"solver": {"solve_s", "search_s"}})  # noqa: E731
    assert strip(a) == strip(b)


# ------------------------------------------------------------------ documents
def test_job_and_pool_documents():
    j = Job(name="x", model="llama2-7b", tokens="1.5T", priority=4, gpu="h100", global_batch=512)
    assert j.tokens == 1.5e12 and j.effective_weight == 4 and j.gpu == ["h100"] and j.global_batch == [512]
    assert Job(name="x", model="m", tokens=1e9).effective_weight == 1.0
    assert Pool.model_validate({"free": {"h100-sxm": 8}}).free["h100-sxm"].gpus == 8
    bad = [
        (lambda: Job(name="x", model="m", tokens="lots"), "token count"),
        (lambda: Job(name="x", model="m", tokens=1e9, weight=1, priority=2), "weight or priority"),
        (lambda: Job(name="x", model="m", tokens=1e9, search={"model": "y"}), "job field"),
        (lambda: Job(name="x", model="m", tokens=1e9, weight=0), "greater than or equal"),
        (lambda: Jobs(jobs=[Job(name="x", model="m", tokens=1), Job(name="x", model="m", tokens=1)]), "distinct"),
        (lambda: Pool.model_validate({"free": {"h100-sxm": {}}}), "gpus: N and/or nodes"),
        (lambda: Pool.model_validate({"free": {}}), "at least 1"),
    ]
    for make, word in bad:
        with pytest.raises(ValueError, match=word):
            make()


def test_result_round_trips_and_to_dataframe(real_problem):
    res = solve(real_problem, "cost")
    assert AllocationResult.model_validate_json(res.model_dump_json()) == res
    df = res.to_dataframe()
    assert list(df["job"]) == ["chat-8b", "code-8b", "small-7b"] and df["scheduled"].all()
    assert {"tp", "pp", "dp", "micro_batch", "zero", "days", "cost_usd"} <= set(df.columns)


# ------------------------------------------------------------------ CLI
def _write(tmp_path, pool=POOL, jobs=JOBS):
    (tmp_path / "pool.yaml").write_text(json.dumps(pool))
    (tmp_path / "jobs.yaml").write_text(json.dumps({"jobs": jobs}))
    return str(tmp_path / "pool.yaml"), str(tmp_path / "jobs.yaml")


def _cli(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input)


def test_cli_table_fits_80_columns(tmp_path):
    pool, jobs = _write(tmp_path, jobs=JOBS + [{"name": "late-70b", "model": "llama2-70b", "tokens": "1T",
                                                "deadline_days": 10}])
    r = _cli("--pool", pool, "--jobs", jobs, "--objective", "makespan")
    assert r.exit_code == 0, r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80
    for word in ("chat-8b", "code-8b", "small-7b", "unscheduled (1):", "late-70b", "misses its deadline",
                 "pool used:", "totals:", "proven optimal"):
        assert word in r.output


def test_cli_json_parses_into_the_result(tmp_path):
    pool, jobs = _write(tmp_path)
    r = _cli("--pool", pool, "--jobs", jobs, "--format", "json", "--objective", "cost", "--time-limit", "5")
    assert r.exit_code == 0, r.output
    res = AllocationResult.model_validate_json(r.output)
    assert res.objective == "cost" and res.totals.scheduled == 3
    # jobs from stdin give the same answer
    r2 = _cli("--pool", pool, "--jobs", "-", "--format", "json", "--objective", "cost",
              input=(tmp_path / "jobs.yaml").read_text())
    assert r2.exit_code == 0, r2.output
    res2 = AllocationResult.model_validate_json(r2.output)
    assert res2.assignments == res.assignments


@pytest.mark.parametrize("which", ["pool", "jobs", "result"])
def test_cli_schema_is_valid_json_schema(which):
    jsonschema = pytest.importorskip("jsonschema")
    r = _cli("--schema", which)
    assert r.exit_code == 0
    doc = json.loads(r.output)
    jsonschema.Draft202012Validator.check_schema(doc)
    if which == "pool":
        jsonschema.validate(POOL, doc)
    if which == "jobs":
        jsonschema.validate({"jobs": JOBS}, doc)
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"jobs": [dict(JOBS[0], colour="red")]}, doc)
    if which == "result":
        res = allocate(POOL, JOBS, objective="makespan")
        jsonschema.validate(json.loads(res.model_dump_json()), doc)


def test_cli_infeasible_exits_3(tmp_path):
    pool, jobs = _write(tmp_path, pool={"free": {"h100-sxm": 8}})
    r = _cli("--pool", pool, "--jobs", jobs)
    assert r.exit_code == 3 and r.stdout == ""
    assert r.stderr.startswith("infeasible: the pool cannot run all 3 jobs at once")
    assert len(r.stderr.strip().splitlines()) == 1
    r = _cli("--pool", pool, "--jobs", jobs, "--allow-unscheduled", "--format", "json")
    assert r.exit_code == 0, r.output
    res = AllocationResult.model_validate_json(r.output)
    assert [a.job for a in res.assignments] == ["small-7b"]  # the heaviest job gets the 8 GPUs


@pytest.mark.parametrize("pool,jobs,word", [
    ({"free": {"nosuchgpu": 8}}, JOBS, "nosuchgpu"),
    ({"free": {"h100-sxm": -1}}, JOBS, "pool: free: h100-sxm: -1 free GPUs"),
    ({"free": {"h100-sxm": 8}}, [{"name": "x", "model": "nosuchmodel", "tokens": 1e9}], "nosuchmodel"),
    ({"free": {"h100-sxm": 8}}, [{"name": "x", "model": "llama2-7b"}], "jobs: jobs.0.tokens"),
    ({"free": {"h100-sxm": 8}}, [{"name": "x", "model": "llama2-7b", "tokens": 1e9, "colour": "red"}], "colour"),
    ({"free": {"h100-sxm": 8}}, [{"name": "x", "model": "llama2-7b", "tokens": 1e9, "gpu": ["nope"]}], "nope"),
    ({"free": {"h100-sxm": 8}}, [{"name": "x", "model": "llama2-7b", "tokens": 1e9,
                                  "search": {"precision": "fp4"}}], "job x: search: precision"),
    ({"free": {"h100": 8, "h100-sxm": 8}}, JOBS, "same system"),
    # an unknown key before the field it misspells (was 'jobs.0.tokens: Field required [+1 more]')
    ({"free": {"h100-sxm": 8}}, [{"name": "x", "model": "llama2-7b", "tokns": "5B"}],
     "jobs.0.tokns: Extra inputs are not permitted (got '5B'); closest: tokens"),
    ({"fre": {"h100-sxm": 8}}, JOBS, "pool: fre: Extra inputs are not permitted; closest: free"),
    # a SearchRequest field on the job itself says where it goes
    ({"free": {"h100-sxm": 8}}, [{"name": "x", "model": "llama2-7b", "tokens": 1e9, "time_limit_s": 2}],
     "time_limit_s: a search setting, not a job field; give it under the job's search: mapping"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, pool, jobs, word):
    p, j = _write(tmp_path, pool=pool, jobs=jobs)
    r = _cli("--pool", p, "--jobs", j)
    assert r.exit_code == 2 and r.stdout == "", r.output
    assert r.stderr.startswith("error: ") and len(r.stderr.strip().splitlines()) == 1
    assert word in r.stderr and "Traceback" not in r.output


def test_cli_bad_files_and_options(tmp_path):
    p, j = _write(tmp_path)
    (tmp_path / "bad.yaml").write_text("free: [unclosed\n")
    for args in (["--pool", str(tmp_path / "bad.yaml"), "--jobs", j], ["--pool", str(tmp_path / "no.yaml"), "--jobs", j],
                 ["--pool", p, "--jobs", j, "--time-limit", "0"], ["--pool", p], ["--pool", p, "--jobs", j,
                                                                                    "--objective", "fastest"]):
        r = _cli(*args)
        assert r.exit_code == 2, (args, r.output)
        assert "Traceback" not in r.output
