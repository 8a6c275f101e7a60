"""Generic multiprocessor DAG scheduling: problems, schedules, the validator, bounds and solvers.

Knows nothing of neural networks and imports neither torch nor pydantic.
"""

from solvers.bounds import heads_tails, lower_bound, lower_bounds
from solvers.problem import OBJECTIVES, UNLIMITED, Problem, Result, Schedule
from solvers.registry import get_solver, register, solve, solver_names
from solvers.simulate import Deadlock, time_orders
from solvers.validate import InvalidSchedule, Violation, memory_profile, peak_memory, validate, violations

__all__ = [
    "OBJECTIVES",
    "UNLIMITED",
    "Deadlock",
    "InvalidSchedule",
    "Problem",
    "Result",
    "Schedule",
    "Violation",
    "get_solver",
    "heads_tails",
    "lower_bound",
    "lower_bounds",
    "memory_profile",
    "peak_memory",
    "register",
    "solve",
    "solver_names",
    "time_orders",
    "validate",
    "violations",
]
