from plan_search import estimate, search
from plan_search import estimate_dataframe, front_dataframe
from plan_search import NoFeasiblePlan, SearchRequest, SearchResult

request = SearchRequest(model="llama3.1-8b", gpu=["h100-sxm"], gpus=[8, 16, 32, 64], tokens=100e9)
try:
    result = search(request)                   # the Pareto front and a recommended plan
except NoFeasiblePlan as exc:                  # nothing fits: str(exc) says why and what would
    raise SystemExit(f"infeasible: {exc}")

best = result.recommended                      # an Estimate: every figure of the recommended plan
print(best.plan.num_gpus, round(best.run.days, 2), round(best.run.cost_usd))

df = front_dataframe(result)                   # one row per front point, plan knobs as columns
print(df[["num_gpus", "tp", "pp", "dp", "zero", "days", "cost_usd", "recommended"]].round(2))

text = result.model_dump_json()                # = plan-search --format json
assert SearchResult.model_validate_json(text) == result

# one plan, as plan-estimate prices it (the same cost model: the same figures)
e = estimate("llama3.1-8b", "h100-sxm", best.plan, tokens=100e9, memory_headroom=request.memory_headroom)
assert e == best
print(estimate_dataframe([e])[["num_gpus", "step_time_s", "mfu", "memory_peak_gib", "run_days"]].round(3))
