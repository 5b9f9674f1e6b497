"""Free motion of the shipped arms without dissipation, shared by test_integrator_accuracy.py (asserts) and
bench/bench_integrators.py (prints): the conservative arm, its bent start, the relative energy error of a run."""
import numpy as np

from flexarm_sim.arms import resolve_arm
from flexarm_sim.model import conservative, load_arm, load_model


def free_arm(name, gravity=True):
    """The shipped arm without modal damping, joint friction and hard stops (spec.conservative)."""
    return load_model(conservative(load_arm(resolve_arm(name)), gravity))


def bent_start(model, fraction=0.05):
    """Joints at the nominal configuration, every link's first mode coordinate at `fraction` of its length and its
    higher ones at a fifth of that: a start that excites the high modes too."""
    z = np.zeros(model.n_coords)
    z[model.q_index] = model.spec.nominal_configuration
    for j, qj in enumerate(model.q_index):
        L = model.spec.joints[j].link.length
        for k in range(model.data.n_modes[j]):
            z[qj + 1 + k] = fraction * L * (1.0 if k == 0 else 0.2)
    return z


def relative_energy_error(res):
    """|E(t) - E(0)| / |E(0)| along a simulate() result recorded with its energy."""
    E = res.energy
    return np.abs(E - E[0]) / abs(E[0])
