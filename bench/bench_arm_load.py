"""Load time of the largest arm descriptions the schema accepts (flexarm_sim/model/spec.py: file size, joints, modes
per link, the mode budget sum (modes per link)^4), against the target: any accepted file loads within 5 s.

    python bench/bench_arm_load.py

Each case is loaded (load_arm + load_model: the modes, the modal integrals, the checks) in a fresh interpreter;
wall and CPU time (time.process_time: the machine is shared, CPU time is what the load itself costs) are printed.
The refused neighbours (one mode more than the budget, a file one byte over) are shown refused, with how long the
refusal took. Measured, never asserted.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import yaml

TARGET_S = 5.0
LINK = {'length': 1.0, 'section': {'shape': 'tube', 'outer_diameter': 0.1, 'inner_diameter': 0.094},
        'material': 'steel', 'boundary': 'clamped_mass', 'damping_ratio': 0.05}


def arm(n_flex, modes, n_rigid=0, name='bench', length=1.0):
    joints = []
    for i in range(n_rigid + n_flex):
        j = {'name': f'j{i}', 'twist': 1.5707963267948966 if i % 2 else 0.0,
             'limits': {'position': [-3.0, 3.0], 'velocity': 2.0, 'effort': 500.0},
             'hub': {'mass': 2.0 * length, 'inertia': 0.05 * length ** 3}}
        j['link'] = dict(LINK, modes=modes, length=length) if i >= n_rigid else {'length': 0.1, 'linear_density': 1.0}
        joints.append(j)
    return {'name': name, 'planar': False, 'gravity': [0.0, 0.0, -9.81], 'joints': joints}


CHILD = r'''
import json, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from flexarm_sim.model import load_model
from flexarm_sim.model.spec import ArmSpecError, load_arm
t1, c1 = time.perf_counter(), time.process_time()
try:
    model = load_model(load_arm(sys.argv[1]))
    out = {'ok': True, 'coords': int(model.n_coords)}
except ArmSpecError as e:
    out = {'ok': False, 'why': str(e).splitlines()[-1].strip()[:90]}
out.update(wall=time.perf_counter() - t1, cpu=time.process_time() - c1)
print(json.dumps(out))
'''


def run(path):
    r = subprocess.run([sys.executable, '-c', CHILD, path], capture_output=True, text=True, timeout=900)
    if r.returncode:
        return {'ok': False, 'why': r.stderr.strip().splitlines()[-1][:90], 'wall': float('nan'), 'cpu': float('nan')}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    from flexarm_sim.model.spec import MAX_FILE_BYTES
    d = tempfile.mkdtemp(prefix='bench_arm_load_')
    cases = [
        ('4 flexible links x (8 in-plane + 8 out-of-plane) modes: budget 262144', arm(4, {'in_plane': 8, 'out_of_plane': 8})),
        ('2 links x (8 + 8) modes (16 each, the per-link limit)', arm(2, {'in_plane': 8, 'out_of_plane': 8})),
        ('7 links x (8 + 4) modes: budget 145152', arm(7, {'in_plane': 8, 'out_of_plane': 4})),
        ('32 joints: 28 rigid + 4 x (4 + 4) modes', arm(4, {'in_plane': 4, 'out_of_plane': 4}, n_rigid=28)),
        ('32 flexible links x (4 + 4) modes (288 coordinates): 131072', arm(32, {'in_plane': 4, 'out_of_plane': 4}, length=0.1)),
        ('32 flexible links x (8 in-plane) modes: 131072', arm(32, {'in_plane': 8}, length=0.1)),
        ('refused: 5 links x (8 + 8) modes (budget 327680)', arm(5, {'in_plane': 8, 'out_of_plane': 8})),
        ('refused: 2 links x (8 + 8 + 8) modes (24 per link)', arm(2, {'in_plane': 8, 'out_of_plane': 8, 'torsion': 8})),
    ]
    print(f'target: every accepted arm loads within {TARGET_S:g} s')
    print(f'{"case":62s} {"result":9s} {"wall s":>7s} {"cpu s":>7s}')
    for label, data in cases:
        path = os.path.join(d, 'arm.yaml')
        with open(path, 'w') as f:
            yaml.safe_dump(data, f)
        r = run(path)
        print(f'{label:62s} {"loaded" if r["ok"] else "refused":9s} {r["wall"]:7.2f} {r["cpu"]:7.2f}'
              + ('' if r['ok'] else f'   {r["why"]}'), flush=True)
    # the largest file accepted: the 4-link arm padded with comments up to the size limit; and one byte over
    text = yaml.safe_dump(arm(2, {'in_plane': 4, 'out_of_plane': 4}))
    for label, size in (('file of exactly the size limit (comments)', MAX_FILE_BYTES),
                        ('refused: file one byte over the limit', MAX_FILE_BYTES + 1)):
        path = os.path.join(d, 'big.yaml')
        with open(path, 'w') as f:
            f.write(text + '#' * (size - len(text) - 1) + '\n')
        r = run(path)
        print(f'{label:62s} {"loaded" if r["ok"] else "refused":9s} {r["wall"]:7.2f} {r["cpu"]:7.2f}'
              + ('' if r['ok'] else f'   {r["why"]}'), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
