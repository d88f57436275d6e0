from plan_search.planner.allocate import AllocationInfeasible, allocate

pool = {"free": {"h100-sxm": 64, "a100-80gb": {"nodes": 4}}}
jobs = [
    {"name": "chat-8b", "model": "llama3.1-8b", "tokens": "100B", "weight": 2},
    {"name": "code-8b", "model": "llama3.1-8b", "tokens": "200B", "deadline_days": 20},
]
try:
    res = allocate(pool, jobs, objective="weighted-completion")
except AllocationInfeasible as exc:            # the pool cannot run every job
    raise SystemExit(f"infeasible: {exc}")     # (allow_unscheduled=True picks the best subset)
print(res.to_dataframe()[["job", "gpu", "num_gpus", "tp", "dp", "days", "cost_usd"]].round(2))
