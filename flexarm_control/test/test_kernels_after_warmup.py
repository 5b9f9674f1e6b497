"""The kernels a node warms up at start (precompile.warm_kernels, precompiled by `make setup`) are all it compiles:
building the controllers and answering states decoded from messages adds no specialisation. A read-only array
(the arm description's nominal configuration, in the controllers' gain rules) was one: dynamics_terms compiled
again inside a controller's first start after `make setup` (6 s: nodes ready after 8.3 s instead of 2.1 s). Run in
a fresh interpreter, whose dispatchers have seen nothing."""
import os
import subprocess
import sys

SCRIPT = r'''
import gc, json
import numpy as np
from numba.core.registry import CPUDispatcher
from flexarm_control.controller import config
from flexarm_control.controller.runtime import ControllerRuntime
from flexarm_sim.arms import arm_id, resolve_arm
from flexarm_sim.model import load_model
from flexarm_sim.model.layout import ArmLayout
from flexarm_sim.plant.outputs import ArmOutputs
from flexarm_sim.precompile import ensure_kernels
from flexarm_sim.ros.flexstate import FlexStateDecoder, FlexStateEncoder

def signatures():
    return {f'{d.__module__}.{d.__name__}': len(d.signatures) for d in gc.get_objects()
            if isinstance(d, CPUDispatcher) and d.__module__.startswith('flexarm')}

path = resolve_arm('deluca_two_link')
model = load_model(path)
ensure_kernels(model)
before = signatures()
outputs = ArmOutputs(model, 20)
layout = ArmLayout.of(model, arm_id(path, model.spec.name))
z = np.linspace(0.1, 0.2, model.n_coords)
st = FlexStateDecoder(layout).decode(FlexStateEncoder(layout, 'world', outputs).fill(z, 0.5 * z, [0.1, 0.2], 3, 6_000_000))

for kind in config.KINDS:
    for lockstep in (True, False):
        rt = ControllerRuntime(kind, model, dict(config.TABLES[kind].defaults(), lockstep=lockstep))
        rt.hold(st.z, st.t)
        for k in range(3):
            rt.on_state(st.z, st.zd, st.t + 0.002 * k)
outputs.geometry(st.z)
model.mass_matrix(st.z), model.rhs(st.z, st.zd), model.accelerations(st.z, st.zd), model.frames(st.z)
after = signatures()
print(json.dumps({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}))
'''


def test_node_work_on_decoded_states_compiles_nothing_after_the_warm_up():
    r = subprocess.run([sys.executable, '-c', SCRIPT], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == '{}', r.stdout
