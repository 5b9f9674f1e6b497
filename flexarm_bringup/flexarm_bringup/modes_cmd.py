"""`flexarm modes <arm.yaml> [--json] [--plot out.png] [--tolerance PCT] [--sensors <set>]`: the modes of an arm.

Per link: the natural frequencies of the link alone with its boundary condition (clamped at the joint,
clamped-mass tip body from the outboard arm at the nominal configuration, or clamped-free). For the whole
arm: the directions of the model linearized at the nominal configuration, joints free (zero torque) and
joints locked (flexarm_sim.model.linearize.whole_arm_modes): elastic frequencies, rigid-body (unrestrained)
directions and unstable ones (divergence rate, never a frequency), and whether the pose is an equilibrium (else
the joint torque that holds it). Each whole-arm frequency and rate is compared with the model that has one more
assumed mode in every bending plane / torsion of every flexible link (with_more_modes): the relative change is
printed and a change beyond --tolerance (default 2 %) is flagged UNCONVERGED. The link-alone frequencies are the
exact roots of each link's beam eigenproblem and need no such check.
With --sensors (e.g. encoders,strain:shoulder@0.05,accel; flexarm_sim/model/sensing.py), which of the whole-arm
modes that sensor set observes at the nominal configuration: rank and condition of the observability Gramian, and
per mode the smallest standard deviation an estimator can reach (flexarm_sim/model/observability.py).
"""
import argparse
import json
import math
import sys

import numpy as np

PLANE_NAMES = ('in_plane', 'out_of_plane', 'torsion')
DEFAULT_TOLERANCE_PCT = 2.0


def _tolerance(text):
    try:
        x = float(text)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and 0.0 < x < 100.0):
        raise argparse.ArgumentTypeError(f'--tolerance: expected a percentage in (0, 100), got {text!r}')
    return x


def add_parser(sub):
    p = sub.add_parser('modes', help='link and whole-arm natural frequencies of an arm description')
    p.add_argument('arm', help='arm description YAML')
    p.add_argument('--json', action='store_true', help='print one JSON object')
    p.add_argument('--plot', metavar='PNG', help='plot the mode shapes of every flexible link into PNG')
    p.add_argument('--tolerance', metavar='PCT', type=_tolerance, default=DEFAULT_TOLERANCE_PCT,
                   help='relative change against one more mode per link above which a whole-arm frequency is '
                        f'flagged unconverged, in %% (default {DEFAULT_TOLERANCE_PCT:g})')
    p.add_argument('--sensors', metavar='SET',
                   help='sensor set, e.g. encoders,strain:shoulder@0.05,accel: which modes it observes')
    p.add_argument('--rate', type=float, default=500.0, help='--sensors: sample rate, Hz (default 500)')
    p.set_defaults(func=run)


def _clean(x, rel=1e-12):
    """Rounding residue (below rel of the largest entry) shown as 0."""
    x = np.asarray(x, dtype=float)
    return np.where(np.abs(x) <= rel * (np.max(np.abs(x)) if x.size else 0.0), 0.0, x)


def _tip_sag(model, q, static_deflection):
    """Per flexible link, how far its tip moves (m) when the held links settle to ArmModes.static_deflection."""
    z0 = np.zeros(model.n_coords)
    z0[model.q_index] = q
    p0, p1 = model.frames(z0)[3], model.frames(z0 + static_deflection)[3]
    return {js.name + '_link': float(np.linalg.norm(p1[j] - p0[j]))
            for j, js in enumerate(model.spec.joints) if js.link.n_modes}


def _modes_per_link(spec):
    return [{'link': js.name + '_link', **{n: c for n, c in zip(PLANE_NAMES, (js.link.n_in_plane,
             js.link.n_out_of_plane, js.link.n_torsion)) if c}} for js in spec.joints if js.link.n_modes]


def _directions(modes, fine, rtol):
    """JSON of one whole_arm_modes result, each direction with its refined value (fine: ArmModes or None)."""
    from flexarm_sim.model.linearize import mode_convergence
    conv = mode_convergence(modes, fine, rtol) if fine is not None else None
    out = {'rigid_body_directions': int(modes.n_rigid), 'elastic': [], 'unstable': []}
    refined = {}
    if conv is not None:
        for kind in ('elastic', 'unstable'):
            sel = [i for i, k in enumerate(conv.kinds) if k == kind]
            refined[kind] = [(conv.omega2_fine[i], conv.relative_change[i], bool(conv.converged[i])) for i in sel]

    def entry(key, value, kind, k, to_value):
        e = {key: float(value)}
        if kind in refined:
            w2, rc, ok = refined[kind][k]
            e.update({'refined': to_value(w2), 'relative_change': float(rc) if math.isfinite(rc) else None,
                      'converged': ok})
        return e

    hz = lambda w2: float(math.sqrt(w2) / (2 * math.pi)) if w2 > 0 else None     # noqa: E731
    rate = lambda w2: float(math.sqrt(-w2)) if w2 < 0 else None                   # noqa: E731
    out['elastic'] = [entry('frequency_hz', f, 'elastic', k, hz) for k, f in enumerate(modes.elastic_frequencies_hz)]
    out['unstable'] = [entry('rate_per_s', r, 'unstable', k, rate) for k, r in enumerate(modes.unstable_rates)]
    return out


def mode_report(model, tolerance_pct=DEFAULT_TOLERANCE_PCT):
    from flexarm_sim.model import ArmSpecError, load_model
    from flexarm_sim.model.linearize import whole_arm_modes, with_more_modes
    q = model.spec.nominal_configuration
    rtol = tolerance_pct / 100.0
    links = []
    for js, lm in zip(model.spec.joints, model.link_modes):
        if not lm.n_modes:
            continue
        links.append({'link': js.name + '_link', 'boundary': js.link.boundary,
                      'tip_mass_kg': lm.tip_mass, 'tip_inertia_kgm2': lm.tip_inertia.tolist(),
                      'modes': [{'plane': PLANE_NAMES[p], 'frequency_hz': float(f)}
                                for p, f in zip(lm.planes, lm.freqs_hz)]})
    fine_model, why = None, None
    if model.mode_index.size:
        try:
            fine_spec = with_more_modes(model.spec)
            fine_model = load_model(fine_spec)
        except ArmSpecError as e:
            why = f'the model with one more mode per link cannot be built: {e}'
    else:
        why = 'no flexible link (a rigid model has no modal truncation)'
    free = whole_arm_modes(model, q, free_joints=True)
    free_fine = whole_arm_modes(fine_model, q, free_joints=True) if fine_model is not None else None
    report = {'arm': model.spec.name, 'nominal_configuration': q.tolist(), 'links': links,
              'equilibrium': free.equilibrium, 'holding_torque_Nm': _clean(free.holding_torque).tolist(),
              'static_tip_displacement_m': _tip_sag(model, q, free.static_deflection),
              'whole_arm_free_joints_hz': free.elastic_frequencies_hz.tolist(),
              'rigid_body_modes': int(free.n_rigid),
              'unstable_rates_per_s': free.unstable_rates.tolist(),
              'whole_arm_free_joints': _directions(free, free_fine, rtol)}
    if model.mode_index.size:
        locked = whole_arm_modes(model, q, free_joints=False)
        locked_fine = whole_arm_modes(fine_model, q, free_joints=False) if fine_model is not None else None
        report['whole_arm_locked_joints_hz'] = locked.elastic_frequencies_hz.tolist()
        report['whole_arm_locked_joints'] = _directions(locked, locked_fine, rtol)
    conv = {'checked': fine_model is not None, 'tolerance': rtol,
            'reference': 'one more assumed mode in every bending plane / torsion of every flexible link',
            'modes_per_link': _modes_per_link(model.spec)}
    if fine_model is not None:
        conv['refined_modes_per_link'] = _modes_per_link(fine_model.spec)
        conv['unconverged'] = sum(not e['converged'] for key in ('whole_arm_free_joints', 'whole_arm_locked_joints')
                                  if key in report for kind in ('elastic', 'unstable') for e in report[key][kind])
    else:
        conv['why_not'] = why
    report['convergence'] = conv
    return report


def sensor_report(model, spec: str, rate: float) -> dict:
    """The observability of the arm's modes from a sensor set (SensorSpecError naming a bad item)."""
    from flexarm_sim.model.observability import observability
    from flexarm_sim.model.sensing import SensorSet
    rep = observability(model, SensorSet.parse(model, spec), dt=1.0 / rate)
    return dict(rep.as_dict(), sensors=spec)


def _fmt_change(e):
    if 'converged' not in e:
        return ''
    rc = e['relative_change']
    txt = '  (changed kind with one more mode per link)' if rc is None else f"  {rc * 100:+8.2f} %"
    return txt + ('' if e['converged'] else '  UNCONVERGED')


def _print_directions(title, d):
    rigid = d['rigid_body_directions']
    extra = f" (+{rigid} rigid-body direction{'s' if rigid != 1 else ''}: unrestrained, 0 Hz)" if rigid else ''
    print(f'  {title}{extra}:' + ('' if d['elastic'] else ' no elastic mode'))
    for e in d['elastic']:
        print(f"    {e['frequency_hz']:12.4f} Hz" + _fmt_change(e))
    for e in d['unstable']:
        print(f"    UNSTABLE direction: diverges as exp(t / {1.0 / e['rate_per_s']:.4g} s), rate "
              f"{e['rate_per_s']:.4f} 1/s" + _fmt_change(e))


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
    report = mode_report(model, args.tolerance)
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
    if report['equilibrium']:
        print('  pose: an equilibrium with zero joint torque')
    else:
        tau = ', '.join(f'{t:.4g}' for t in report['holding_torque_Nm'])
        sag = {k: v for k, v in report['static_tip_displacement_m'].items() if v > 0}
        print(f'  pose: NOT an equilibrium: holding it takes the joint torques [{tau}] N m'
              + (' and the links sag there (static tip displacement ' + ', '.join(f'{k} {v * 1e3:.3g} mm'
                 for k, v in sag.items()) + ')' if sag else ''))
        print('        the whole-arm directions below are those of the arm held there by these constant torques')
    for link in report['links']:
        print(f"  {link['link']} ({link['boundary']}, tip mass {link['tip_mass_kg']:.4g} kg):")
        for mode in link['modes']:
            print(f"    {mode['plane']:<13} {mode['frequency_hz']:10.4f} Hz")
    _print_directions('whole arm, joints free', report['whole_arm_free_joints'])
    if 'whole_arm_locked_joints' in report:
        _print_directions('whole arm, joints locked', report['whole_arm_locked_joints'])
    conv = report['convergence']
    if conv['checked']:
        n = conv['unconverged']
        def per_link(m):
            return '; '.join(f"{e['link']} " + ', '.join(f'{k} {v}' for k, v in e.items() if k != 'link') for e in m)
        print(f"  convergence: relative change of each whole-arm value against {conv['reference']}")
        print(f"    ({per_link(conv['modes_per_link'])} -> {per_link(conv['refined_modes_per_link'])}); "
              f"beyond {conv['tolerance'] * 100:g} % flagged UNCONVERGED: "
              + (f'{n} value{"s" if n != 1 else ""} (add modes per link)' if n else 'all converged'))
    else:
        print(f"  convergence not checked: {conv['why_not']}")
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
