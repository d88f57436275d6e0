"""The search: the space of plans, the requests and results, the Pareto front and the CP-SAT model."""
