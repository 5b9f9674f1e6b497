"""`flexarm excite`: design a safe identification experiment for an arm and run it on the simulated plant, recording.

    flexarm excite --arm deluca_two_link --record exc.mcap [--duration 30] [--amplitude DEG[,DEG..]]
                   [--band LO,HI] [--n-freq 24] [--seed 0] [--sensors encoders|strain|strain_accel]
                   [--time-mode lockstep|simtime|realtime] [--control-rate 500] [--plant-arm ARM] [--json]

The experiment (flexarm_control.identification.experiment): pd_servo holds the arm at its nominal configuration
(Naganathan's gains for this arm and control rate, or --kp/--kv) and tracks a multisine joint reference spanning
the first whole-arm modes, faded in and out. It is simulated on the arm file first and refused, saying which limit,
if it would leave a joint's position limits, use more than 60 % of a velocity or effort limit or bend a link beyond
half the model's validity; without --amplitude the largest safe amplitude per joint is chosen. The run itself is
`flexarm run`'s (the same nodes, launch parameters and recording), with the plant modelling the sensor set (its
/joint_states the encoders' readings at the control rate). The recording's `flexarm_experiment` metadata holds the
law's gains, the excitation and the arm's id: `flexarm identify` replays that law.

--plant-arm simulates another arm (same joints and modes) under the experiment designed on --arm: hidden
parameters, for trying identification where the truth is known.

--hardware runs it on the servos of a running hardware bridge (`ros2 launch flexarm_bringup hardware.launch.py
controller:=none`, servos enabled): no plant is started, pd_servo runs in real time at --control-rate (the bridge's
loop_rate) and the recording holds the bridge's /flexarm/applied_effort (when each command reached the servos), so
`flexarm identify` replays the loop with its real timing.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys

import numpy as np

ARM_DEFAULT = 'deluca_two_link'


def _floats(text, what):
    try:
        vals = [float(x) for x in str(text).split(',') if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f'{what}: expected numbers separated by commas, got {text!r}') from None
    if not vals or not all(math.isfinite(v) for v in vals):
        raise argparse.ArgumentTypeError(f'{what}: expected finite numbers, got {text!r}')
    return vals


def _rate(text, what):
    v = _floats(text, what)
    if len(v) != 1 or not v[0] > 0:
        raise argparse.ArgumentTypeError(f'{what}: expected one rate > 0 Hz, got {text!r}')
    return v[0]


def add_parser(sub):
    from flexarm_sim.plant.config import CONTROL_RATE as DEFAULT_CONTROL_RATE
    from flexarm_sim.sensors import PRESETS
    p = sub.add_parser('excite', help='design a safe identification experiment and run it, recording an MCAP')
    p.add_argument('--arm', default=ARM_DEFAULT, help='the nominal arm (a shipped arm name or a YAML path)')
    p.add_argument('--record', metavar='MCAP', required=True, help='the recording to write')
    p.add_argument('--duration', type=float, default=30.0, help='s of excitation (default 30)')
    p.add_argument('--amplitude', type=lambda s: _floats(s, '--amplitude'), default=None, metavar='DEG[,DEG..]',
                   help='peak of the multisine per joint, degrees (default: the largest within the limits)')
    p.add_argument('--band', type=lambda s: _floats(s, '--band'), default=None, metavar='LO,HI',
                   help='Hz (default: from the arm\'s first whole-arm modes)')
    p.add_argument('--n-freq', type=int, default=24, help='sines per joint')
    p.add_argument('--seed', type=int, default=0, help='the phases\' random draw')
    p.add_argument('--kp', type=lambda s: _floats(s, '--kp'), default=None, help='pd_servo kp per joint (N m/rad)')
    p.add_argument('--kv', type=lambda s: _floats(s, '--kv'), default=None, help='pd_servo kv per joint (N m s/rad)')
    p.add_argument('--sensors', default='encoders', choices=PRESETS, help='what the plant measures and publishes')
    p.add_argument('--time-mode', default='lockstep', choices=('lockstep', 'simtime', 'realtime'))
    p.add_argument('--rate', type=lambda s: _rate(s, '--rate'), default=1000.0, help='plant loop rate, Hz')
    p.add_argument('--control-rate', type=lambda s: _rate(s, '--control-rate'), default=DEFAULT_CONTROL_RATE,
                   help='control rate, Hz (the recording\'s samples)')
    p.add_argument('--plant-arm', metavar='ARM', default='',
                   help='simulate this arm (same joints and modes) under the experiment designed on --arm')
    p.add_argument('--hardware', action='store_true',
                   help='on a running hardware bridge\'s servos (enabled), not the simulated plant; real time')
    p.add_argument('--namespace', default='/')
    p.add_argument('--json', action='store_true', help='print the design and the run\'s summary as JSON')
    p.add_argument('--quiet', action='store_true', help='no progress lines')
    p.set_defaults(func=excite)


def _vector(v, n, what):
    if v is None:
        return None
    if len(v) == 1:
        v = v * n
    if len(v) != n:
        raise ValueError(f'{what}: one value or one per joint ({n}), got {len(v)}')
    return np.asarray(v, dtype=float)


def _about(exc, q0):
    """The excitation's points about the arm's present configuration q0 (the design's is the nominal one)."""
    times, P, V, A = exc.trajectory(100.0)
    return times, P + (np.asarray(q0, dtype=float) - np.asarray(exc.q0, dtype=float)), V, A


def excite(args):
    from flexarm_control.identification import ExcitationError, design_excitation
    from flexarm_sim.arms import arm_id, resolve_arm
    from flexarm_sim.common.params import ConfigError
    from flexarm_sim.model import load_model
    from flexarm_sim.sensors import DEFAULTS, preset_values

    from . import runner

    try:
        path = resolve_arm(args.arm, 'arm')
        model = load_model(path)
        n = model.n_joints
        dt = 1.0 / args.control_rate
        amp = _vector(args.amplitude, n, '--amplitude')
        # the gains the node will run: outside lock-step it designs for its law's input delay (k_v capped)
        from flexarm_control.controller.kinds import law_class
        delay = None if (args.time_mode == 'lockstep' and not args.hardware) else \
            law_class('pd_servo').design_periods(args.control_rate) * dt
        exc, kp, kv, figures = design_excitation(
            model, duration=args.duration, dt=dt, amplitude=None if amp is None else np.radians(amp),
            band=None if args.band is None else tuple(args.band), n_freq=args.n_freq, seed=args.seed,
            kp=_vector(args.kp, n, '--kp'), kv=_vector(args.kv, n, '--kv'), input_delay=delay)
    except (ConfigError, ExcitationError, ValueError) as e:
        print(f'flexarm excite: {e}', file=sys.stderr)
        return 2
    if args.hardware:
        if args.plant_arm:
            print('flexarm excite: --plant-arm simulates an arm; --hardware runs on the servos', file=sys.stderr)
            return 2
        args.time_mode = 'realtime'
        args.sensors = 'encoders'
    design = {'arm': model.spec.name, 'arm_id': arm_id(path, model.spec.name), 'law': 'pd_servo',
              'kp': [float(x) for x in kp], 'kv': [float(x) for x in kv], 'control_rate_hz': args.control_rate,
              'sensors': args.sensors, 'strain_bandwidth_hz': DEFAULTS['strain.bandwidth'],
              'accel_bandwidth_hz': DEFAULTS['accelerometer.bandwidth'],
              'excitation': exc.describe(),
              'predicted': {k: (v.tolist() if hasattr(v, 'tolist') else v) for k, v in figures.items()}}
    if not args.json:
        print(f'experiment on {model.spec.name}: {args.duration:g} s, {len(exc.frequencies)} sines per joint from '
              f'{exc.frequencies[0]:.3g} to {exc.frequencies[-1]:.3g} Hz, amplitude '
              + ', '.join(f'{math.degrees(a):.2f}' for a in exc.amplitude) + ' deg')
        print('  held by pd_servo: kp ' + ', '.join(f'{x:.4g}' for x in kp) + ' N m/rad, kv '
              + ', '.join(f'{x:.4g}' for x in kv) + ' N m s/rad')
        print('  predicted on the arm file: peak torque ' + ', '.join(f'{x:.3g}' for x in figures['peak_torque'])
              + ' N m, peak velocity ' + ', '.join(f'{x:.3g}' for x in figures['peak_velocity'])
              + f' rad/s, largest link deflection {100 * figures["peak_deflection"]:.1f} % of its length')
        sys.stdout.flush()
    values = preset_values(model.spec, args.sensors)
    plant_extra = dict(values, **{'publish_rates.joint_states': args.control_rate})
    if values.get('sensors.strain.gauges'):
        plant_extra['sensors.strain.rate'] = args.control_rate
        plant_extra['sensors.strain.bandwidth'] = design['strain_bandwidth_hz']
    else:
        plant_extra.pop('sensors.strain.gauges', None)
    if values.get('sensors.accelerometer.enabled'):
        plant_extra['sensors.accelerometer.rate'] = args.control_rate
        plant_extra['sensors.accelerometer.bandwidth'] = design['accel_bandwidth_hz']
    run_args = argparse.Namespace(
        arm=args.arm, controller='pd_servo', duration=args.duration + 1.0, rate=args.rate,
        control_rate=args.control_rate, time_mode=args.time_mode, shaping='none', angle=0.0,
        move_time=args.duration, lead=0.5, plant_arm=args.plant_arm, record=args.record, plot=None, json=args.json,
        single_process=False, attach=False, quiet=args.quiet, plant_servo=False, estimator='none',
        namespace=args.namespace, plant_extra=plant_extra,
        controller_extra={'kp': design['kp'], 'kv': design['kv'], 'feedforward': True},
        metadata={'flexarm_experiment': {'design': json.dumps(design)}},
        trajectory=lambda q0: _about(exc, q0), hardware=args.hardware)
    if args.json:
        print(json.dumps({'design': design}))
    # the run's summary is a move's (a tip path against a reference): of an experiment only what it did to the arm
    # is said (the runner's own exit codes and messages on stderr kept)
    out = io.StringIO()
    run_args.json = True
    with contextlib.redirect_stdout(out):
        code = runner.run(run_args)
    lines = out.getvalue().strip().splitlines()
    try:
        s = json.loads(lines[-1]) if lines else None
    except ValueError:
        s = None
    if s is None:
        sys.stdout.write(out.getvalue())
        return code
    summary = {'recording': s.get('record', {}).get('path'), 'messages': sum(s.get('record', {}).get(
        'messages', {}).values()), 'complete': s.get('record', {}).get('complete'),
        'peak_torque_nm': s.get('peak_torque_nm'), 'max_deflection_over_length': s.get('max_deflection_over_length'),
        'validity_limit': s.get('validity_limit'), 'lost': s.get('lost'), 'validity_left': s.get('validity_left'),
        'time_mode': s.get('time_mode'), 'plant_arm': s.get('plant_arm')}
    if args.json:
        print(json.dumps({'run': summary}))
        return code
    print(f'flexarm excite: {args.duration:g} s of excitation on {s.get("plant_arm")} ({s.get("time_mode")})')
    print('  peak torque           ' + ', '.join(f'{x:.3g}' for x in summary['peak_torque_nm'] or []) + ' N m')
    print('  link deflection       ' + ', '.join(f'{100 * x:.1f}' for x in summary['max_deflection_over_length'] or [])
          + f' % of length (model valid to {100 * (summary["validity_limit"] or 0):.0f} %)')
    print(f'  recording             {summary["recording"]} ({summary["messages"]} messages'
          + ('' if summary['complete'] else ', INCOMPLETE') + ')')
    if code == 0:
        print(f'identify with: flexarm identify {args.record} --arm {args.arm} --fit <parameters>')
    return code
