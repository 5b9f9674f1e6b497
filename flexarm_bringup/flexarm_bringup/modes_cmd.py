"""`flexarm modes <arm.yaml> [--json] [--plot out.png] [--sensors <set>]`: the modes of an arm.

Per link: the natural frequencies of the link alone with its boundary condition (clamped at the joint,
clamped-mass tip body from the outboard arm at the nominal configuration, or clamped-free). For the whole
arm: the frequencies of the model linearized at the nominal configuration, joints free (zero torque) and
joints locked. With --sensors (e.g. encoders,strain:shoulder@0.05,accel; flexarm_sim/model/sensing.py), which of
the whole-arm modes that sensor set observes at the nominal configuration: rank and condition of the observability
Gramian, and per mode the smallest standard deviation an estimator can reach (flexarm_sim/model/observability.py).
"""
import json
import sys

import numpy as np

PLANE_NAMES = ('in_plane', 'out_of_plane', 'torsion')


def add_parser(sub):
    p = sub.add_parser('modes', help='link and whole-arm natural frequencies of an arm description')
    p.add_argument('arm', help='arm description YAML')
    p.add_argument('--json', action='store_true', help='print one JSON object')
    p.add_argument('--plot', metavar='PNG', help='plot the mode shapes of every flexible link into PNG')
    p.add_argument('--sensors', metavar='SET',
                   help='sensor set, e.g. encoders,strain:shoulder@0.05,accel: which modes it observes')
    p.add_argument('--rate', type=float, default=500.0, help='--sensors: sample rate, Hz (default 500)')
    p.set_defaults(func=run)


def mode_report(model):
    from flexarm_sim.model import whole_arm_modes
    q = model.spec.nominal_configuration
    links = []
    for js, lm in zip(model.spec.joints, model.link_modes):
        if not lm.n_modes:
            continue
        links.append({'link': js.name + '_link', 'boundary': js.link.boundary,
                      'tip_mass_kg': lm.tip_mass, 'tip_inertia_kgm2': lm.tip_inertia.tolist(),
                      'modes': [{'plane': PLANE_NAMES[p], 'frequency_hz': float(f)}
                                for p, f in zip(lm.planes, lm.freqs_hz)]})
    free = whole_arm_modes(model, q, free_joints=True)
    report = {'arm': model.spec.name, 'nominal_configuration': q.tolist(), 'links': links,
              'whole_arm_free_joints_hz': free.elastic_frequencies_hz.tolist(),
              'rigid_body_modes': int(free.n_rigid)}
    if model.mode_index.size:
        report['whole_arm_locked_joints_hz'] = whole_arm_modes(model, q, free_joints=False).frequencies_hz.tolist()
    return report


def sensor_report(model, spec: str, rate: float) -> dict:
    """The observability of the arm's modes from a sensor set (SensorSpecError naming a bad item)."""
    from flexarm_sim.model.observability import observability
    from flexarm_sim.model.sensing import SensorSet
    rep = observability(model, SensorSet.parse(model, spec), dt=1.0 / rate)
    return dict(rep.as_dict(), sensors=spec)


def plot_modes(model, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    flex = [(js, lm) for js, lm in zip(model.spec.joints, model.link_modes) if lm.n_modes]
    fig, axes = plt.subplots(len(flex) or 1, 1, figsize=(7, 2.6 * max(1, len(flex))), squeeze=False)
    for ax, (js, lm) in zip(axes[:, 0], flex):
        eta = np.linspace(0.0, js.link.length, 200)
        phi, th = lm.displacement(eta), lm.rotation(eta)
        for k, (plane, f) in enumerate(zip(lm.planes, lm.freqs_hz)):
            y = th[k, 0] if plane == 2 else phi[k, 1 + plane]
            ax.plot(eta, y, label=f'{PLANE_NAMES[plane]} {k + 1}: {f:.3g} Hz')
        ax.set_title(f'{js.name}_link ({js.link.boundary})')
        ax.set_xlabel('x along the link [m]')
        ax.set_ylabel('mode shape')
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args):
    from flexarm_sim.model import ArmSpecError, load_model
    try:
        model = load_model(args.arm)
    except (ArmSpecError, OSError) as e:
        print(f'flexarm modes: {e}', file=sys.stderr)
        return 2
    report = mode_report(model)
    if getattr(args, 'sensors', None):
        from flexarm_sim.model.sensing import SensorSpecError
        if not args.rate > 0:
            print('flexarm modes: --rate must be > 0', file=sys.stderr)
            return 2
        try:
            report['observability'] = sensor_report(model, args.sensors, args.rate)
        except SensorSpecError as e:
            print(f'flexarm modes: --sensors: {e}', file=sys.stderr)
            return 2
    if args.plot:
        plot_modes(model, args.plot)
        report['plot'] = args.plot
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"arm {report['arm']} at q = {report['nominal_configuration']}")
    for link in report['links']:
        print(f"  {link['link']} ({link['boundary']}, tip mass {link['tip_mass_kg']:.4g} kg):")
        for mode in link['modes']:
            print(f"    {mode['plane']:<13} {mode['frequency_hz']:10.4f} Hz")
    print('  whole arm, joints free  : ' + ', '.join(f'{f:.4f}' for f in report['whole_arm_free_joints_hz']) + ' Hz'
          + f"  (+{report['rigid_body_modes']} rigid-body modes)")
    if 'whole_arm_locked_joints_hz' in report:
        print('  whole arm, joints locked: ' + ', '.join(f'{f:.4f}' for f in report['whole_arm_locked_joints_hz'])
              + ' Hz')
    if 'observability' in report:
        _print_observability(report['observability'])
    if args.plot:
        print(f'  mode shapes plotted to {args.plot}')
    return 0


def _print_observability(o):
    n = o['states']
    cond = 'inf' if o['condition'] is None else f"{o['condition']:.3g}"
    print(f"  sensors {o['sensors']} ({len(o['readings'])} readings, sampled every {1e3 * o['dt_s']:g} ms, over "
          f"{o['horizon_s']:.3g} s):")
    print(f"    observability Gramian: rank {o['rank']} of {n} states, condition {cond}"
          + ('' if o['rank'] == n else f"  ({n - o['rank']} directions unobservable)"))
    for m in o['modes']:
        what = 'rigid-body mode' if m['rigid'] else f"{m['frequency_hz']:10.4f} Hz"
        if m['observable']:
            unit = 'rad' if m['rigid'] else 'm at the tip'
            print(f"    {what:<16} observed, best estimate std {m['std']:.3g} {unit}")
        else:
            print(f"    {what:<16} NOT observable")
