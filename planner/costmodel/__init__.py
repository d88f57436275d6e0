"""The analytic cost model: one plan or many, memory and step time. Pure numpy; imports nothing from the search, sweeps, allocation, emitters, API or plots."""
