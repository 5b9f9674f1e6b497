"""Planning in a process of its own (worker.py: niced, holding no lock the control loop needs; real time, no ROS).

The parent sends the law's `TipTracking.plan_job()` (the arm's spec, dt and options: the worker builds the same
ArmModel), then per move (reference, t_now, z0, zd0), and receives ('plan', Plan), ('refused', reason) for a move
that cannot be planned (planning.PlanError) or ('failed', repr) for anything else. The worker plans with the law's
own `plan_with`, so it plans exactly as the law does in-process.
"""
from __future__ import annotations

from .worker import STOP_GRACE_S, WorkerProcess, WorkerProcessError  # noqa: F401 - STOP_GRACE_S: tests

__all__ = ['PlanWorker', 'PlanningProcessError', 'plan_server']


class PlanningProcessError(WorkerProcessError):
    """The planning process failed or exited (not: the move cannot be planned)."""


def plan_server(job):
    """The worker's request handler (worker.py): the plan of (reference, t_now, z0, zd0)."""
    from flexarm_sim.model import load_model

    from ..laws.tip_tracking import plan_with
    from ..planning import PlanError
    spec, dt, options = job
    model = load_model(spec)

    def handle(request):
        reference, t_now, z0, zd0 = request
        try:
            return 'plan', plan_with(model, dt, options, reference, t_now, z0, zd0)
        except PlanError as e:
            return 'refused', str(e)
    return handle


class PlanWorker(WorkerProcess):
    """The planning process of one law (`law.plan_job()`); `plan` blocks the calling thread (not the interpreter)."""

    error = PlanningProcessError

    def __init__(self, job):
        super().__init__(f'{__name__}:plan_server', job, 'planning')

    def plan(self, reference, t_now, z0, zd0, timeout=600.0):
        """The Plan; planning.PlanError if the move cannot be planned, PlanningProcessError if the process failed
        or was stopped meanwhile (the next call starts a new one)."""
        from ..planning import PlanError
        kind, value = self.call((reference, t_now, z0, zd0), timeout)
        if kind == 'plan':
            return value
        if kind == 'refused':
            raise PlanError(value)
        raise PlanningProcessError(value)
