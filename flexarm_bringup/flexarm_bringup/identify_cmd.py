"""`flexarm identify`: calibrate an arm file's physical parameters to recordings of identification experiments.

    flexarm identify exc.mcap [more.mcap ...] --arm deluca_two_link --fit '*.EI_z,payload.mass,*.damping_ratio'
                     [--holdout other.mcap] [-o calibrated.yaml] [--plot fit.png] [--json] [--max-iter 40]

Reads from each recording (`flexarm excite`, or any run of pd_servo with --kp/--kv given):
  /joint_states             position of every joint of the arm: the readings the model must predict
  /flexarm/effort_command   the torque the law commanded for each control period (`step`: which period)
  /flexarm/state            the joint positions and velocities the law acted on (a simulated plant's exact ones,
                            the bridge's readings); without it, /joint_states' position and velocity
  /flexarm/strain           strain gauge readings, if recorded (`flexarm excite --sensors strain`): fitted too, each
                            gauge about its mean (its bias is not a model parameter), weighted by its variance, the
                            amplifier's low-pass (metadata strain_bandwidth_hz, or --strain-bandwidth) applied to
                            the prediction; --joints-only leaves them out
  /flexarm/tip_imu          the tip accelerometer's linear acceleration, if recorded (`flexarm excite --sensors
                            strain_accel`): fitted too, each axis about its mean, weighted by its covariance, its
                            low-pass (metadata accel_bandwidth_hz, or --accel-bandwidth) applied to the prediction;
                            --joints-only leaves it out
  metadata flexarm_experiment  the law's gains, the arm's name and id, the control rate
and fits the named parameters (flexarm_control.identification.parameters: `<joint>.EI_z`, `<joint>.damping_ratio`,
`payload.mass`, ...; `*` for every joint) by output error on the package's own nonlinear model, replaying the
recorded closed loop (output_error.py). Prints one line per iteration, then the table (nominal, estimate, standard
error; what these signals cannot determine is said and kept at its nominal value), the fit (NRMSE per joint) on the
data used and on --holdout, and the whole-arm frequencies of the nominal and the calibrated arm.

-o writes the calibrated arm file (validated as every arm file is; the estimates and standard errors in its header);
nothing is written without it, and not when the fit did not converge. Exit codes: 0 converged, 2 bad input,
6 not converged (the best estimate printed).
"""
from __future__ import annotations

import json
import math
import os
import sys

import numpy as np

NOT_CONVERGED_EXIT_CODE = 6
JOINT_STATES = '/joint_states'
COMMANDS = '/flexarm/effort_command'
LAW_STATE = '/flexarm/state'          # what the law acted on (a simulated plant's exact joints; the bridge's readings)
STRAIN = '/flexarm/strain'
TIP_IMU = '/flexarm/tip_imu'
APPLIED = '/flexarm/applied_effort'     # a hardware bridge's writes (when each command reached the servos)
HARDWARE_GAP = 10                     # readings this many periods apart: the loop stalled (refused)


def add_parser(sub):
    p = sub.add_parser('identify', help='calibrate an arm file to recordings of identification experiments')
    p.add_argument('recordings', nargs='+', metavar='MCAP', help='recordings of `flexarm excite` (fitted together)')
    p.add_argument('--arm', required=True, help='the nominal arm file the experiments ran with (name or path)')
    p.add_argument('--fit', required=True, metavar='P1,P2,..',
                   help='parameters: <joint>.EI_z|EI_y|damping_ratio|hub_inertia|viscous|coulomb|torque_scale|'
                        'encoder_offset, payload.mass|inertia, loop.delay (a hardware recording); <joint> a joint '
                        'name or * (every joint)')
    p.add_argument('--holdout', metavar='MCAP', action='append', default=[],
                   help='a recording not fitted: the calibrated model\'s prediction of it is reported')
    p.add_argument('-o', '--output', metavar='YAML', help='write the calibrated arm file here')
    p.add_argument('--plot', metavar='PNG', help='measured vs replayed joints and the residuals')
    p.add_argument('--json', action='store_true', help='print the result as one JSON object')
    p.add_argument('--max-iter', type=_positive_int, default=40)
    p.add_argument('--counts-per-rev', type=int, default=None,
                   help='encoder counts per turn (the readings\' resolution; default the plant\'s sensor model)')
    p.add_argument('--kp', default=None, help='the law\'s kp per joint, for a recording without flexarm_experiment')
    p.add_argument('--kv', default=None, help='the law\'s kv per joint, for a recording without flexarm_experiment')
    p.add_argument('--joints-only', action='store_true',
                   help='fit the joint readings only, even where strain gauges or a tip accelerometer were recorded')
    p.add_argument('--strain-bandwidth', type=float, default=None, metavar='HZ',
                   help='the gauges\' amplifier low-pass (default the recording\'s metadata, else the plant\'s sensor '
                        'model); 0 = none')
    p.add_argument('--accel-bandwidth', type=float, default=None, metavar='HZ',
                   help='the tip accelerometer\'s low-pass (default the recording\'s metadata, else the plant\'s '
                        'sensor model); 0 = none')
    p.set_defaults(func=identify_main)


class RecordingError(ValueError):
    pass


def _positive_int(text):
    import argparse
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f'expected a whole number >= 1, got {text!r}')
    return v


def _stamp_ns(header) -> int:
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def _metadata(reader):
    out = {}
    for m in reader.iter_metadata():
        out[m.name] = dict(m.metadata)
    return out


def read_record(path, spec, counts_per_rev=None, kp=None, kv=None, strain=True, strain_bandwidth=None, accel=True,
                accel_bandwidth=None):
    """The ClosedLoopRecord of a recording for the arm `spec` (module docstring); RecordingError naming the topic or
    field it cannot use."""
    from mcap.reader import make_reader
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Imu, JointState

    from flexarm_control.identification import ClosedLoopRecord
    from flexarm_msgs.msg import AppliedEffort, FlexState, JointEffortCommand, StrainGauges
    from flexarm_sim.sensors import DEFAULTS

    names = [j.name for j in spec.joints]
    n = len(names)
    try:
        f = open(path, 'rb')
    except OSError as e:
        raise RecordingError(f'{path}: {e.strerror}') from None
    with f:
        try:
            reader = make_reader(f)
            meta = _metadata(reader)
            states, commands, law, gauges, imus, applied = {}, {}, {}, {}, {}, []
            topics = [JOINT_STATES, COMMANDS, LAW_STATE, APPLIED] + ([STRAIN] if strain else []) + \
                ([TIP_IMU] if accel else [])
            for _schema, channel, msg in reader.iter_messages(topics=topics):
                if channel.topic == TIP_IMU:
                    m = deserialize_message(msg.data, Imu)
                    imus[_stamp_ns(m.header)] = m
                elif channel.topic == APPLIED:
                    m = deserialize_message(msg.data, AppliedEffort)
                    cs = int(m.command_stamp.sec) * 1_000_000_000 + int(m.command_stamp.nanosec)
                    applied.append((_stamp_ns(m.header), cs, np.asarray(m.effort, dtype=float)))
                elif channel.topic == STRAIN:
                    m = deserialize_message(msg.data, StrainGauges)
                    gauges[_stamp_ns(m.header)] = m
                elif channel.topic == JOINT_STATES:
                    m = deserialize_message(msg.data, JointState)
                    states[_stamp_ns(m.header)] = m
                elif channel.topic == LAW_STATE:
                    m = deserialize_message(msg.data, FlexState)
                    law[_stamp_ns(m.header)] = m
                else:
                    m = deserialize_message(msg.data, JointEffortCommand)
                    commands[_stamp_ns(m.header)] = m
        except Exception as e:             # mcap raises its own errors for a damaged file
            raise RecordingError(f'{path}: not a readable MCAP recording ({type(e).__name__}: {e})') from None
    design = None
    if 'flexarm_experiment' in meta:
        try:
            design = json.loads(meta['flexarm_experiment']['design'])
        except (KeyError, ValueError) as e:
            raise RecordingError(f'{path}: metadata flexarm_experiment.design is not readable ({e})') from None
    run = meta.get('flexarm_run', {})
    recorded_arm = (design or {}).get('arm') or run.get('arm')
    if recorded_arm and recorded_arm != spec.name:
        raise RecordingError(f'{path}: recorded with arm {recorded_arm!r}, --arm is {spec.name!r}: another arm\'s '
                             'recording')
    if kp is None or kv is None:
        if design is None:
            raise RecordingError(f'{path}: no flexarm_experiment metadata (not made by `flexarm excite`): the law\'s '
                                 'gains are needed, give --kp and --kv')
        kp = design.get('kp') if kp is None else kp
        kv = design.get('kv') if kv is None else kv
    out = []
    for name, v in (('kp', kp), ('kv', kv)):
        try:
            a = np.asarray(v, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            a = np.array([np.nan])
        if a.size not in (1, n) or not np.all(np.isfinite(a)):
            raise RecordingError(f'{path}: the law\'s {name}: expected one value or one per joint ({n}), got '
                                 f'{list(a)}' + ('' if design is None else ' (metadata flexarm_experiment.design)'))
        out.append(np.broadcast_to(a, (n,)).copy())
    kp, kv = out
    if not states:
        raise RecordingError(f'{path}: no {JOINT_STATES} messages (the joint readings are needed)')
    if not commands:
        raise RecordingError(f'{path}: no {COMMANDS} messages (the commanded torques are needed)')
    stamps = sorted(states)
    first = states[stamps[0]]
    missing = [j for j in names if j not in first.name]
    if missing:
        raise RecordingError(f'{path}: {JOINT_STATES}.name has {list(first.name)}, not the arm\'s joint(s) '
                             f'{", ".join(missing)}: another arm\'s recording')
    order = [list(first.name).index(j) for j in names]
    Q, QD = np.empty((len(stamps), n)), np.empty((len(stamps), n))
    for k, s in enumerate(stamps):
        m = states[s]
        if list(m.name) != list(first.name):
            raise RecordingError(f'{path}: {JOINT_STATES}.name changes at t = {s * 1e-9:.6f} s')
        if len(m.position) != len(m.name):
            raise RecordingError(f'{path}: {JOINT_STATES}.position has {len(m.position)} values for {len(m.name)} '
                                 f'joints at t = {s * 1e-9:.6f} s')
        if len(m.velocity) != len(m.name):
            raise RecordingError(f'{path}: {JOINT_STATES}.velocity is missing (or short) at t = {s * 1e-9:.6f} s: '
                                 'the law\'s velocity feedback is replayed from it')
        Q[k] = [m.position[i] for i in order]
        QD[k] = [m.velocity[i] for i in order]
    if applied or run.get('plant') == 'hardware_bridge':
        return _hardware_record(path, stamps, Q, QD, commands, law, applied, names, kp, kv, counts_per_rev)
    rate = float(run.get('control_rate_hz') or (design or {}).get('control_rate_hz') or 0.0)
    steps = np.diff(stamps)
    period = int(np.median(steps)) if steps.size else 0
    if rate > 0 and abs(period - 1e9 / rate) > 1.0:
        raise RecordingError(f'{path}: {JOINT_STATES} comes every {period * 1e-9:.6g} s, the control period is '
                             f'{1 / rate:.6g} s (the plant must publish its readings at the control rate)')
    if period <= 0:
        raise RecordingError(f'{path}: {JOINT_STATES}: fewer than two samples')
    gaps = np.flatnonzero(steps != period)
    if gaps.size:
        k = int(gaps[0])
        raise RecordingError(f'{path}: {JOINT_STATES} has a gap: {steps[k] * 1e-9:.6g} s between t = '
                             f'{stamps[k] * 1e-9:.6f} and {stamps[k + 1] * 1e-9:.6f} s (period {period * 1e-9:.6g} s)'
                             f'; {gaps.size} irregular interval(s) in all')
    U = np.empty((len(stamps), n))
    step_of = {}
    plant_rate = float(run.get('rate_hz') or 0.0)
    for k, s in enumerate(stamps):
        c = commands.get(s)
        if c is None:
            raise RecordingError(f'{path}: {COMMANDS}: no command computed from the readings at t = {s * 1e-9:.6f} s')
        if len(c.effort) != n:
            raise RecordingError(f'{path}: {COMMANDS}.effort has {len(c.effort)} values, the arm {n} joints')
        U[k] = c.effort
        step_of[k] = int(c.step)
    if plant_rate > 0:
        stride = plant_rate / (1e9 / period)
        delays = {round((step_of[k] - 1 - stamps[k] * 1e-9 * plant_rate) / stride, 6) for k in step_of}
        if len(delays) != 1 or not float(next(iter(delays))).is_integer() or next(iter(delays)) < 0:
            raise RecordingError(f'{path}: {COMMANDS}.step: the commands act {sorted(delays)[:5]} control periods '
                                 'after their readings: one whole number of periods is needed (a lock-step or '
                                 'sim-time run)')
        delay = int(next(iter(delays)))
    else:
        delay = 0
    LQ, LQD = _law_input(path, law, stamps, names, Q)
    if not (np.all(np.isfinite(Q)) and np.all(np.isfinite(QD)) and np.all(np.isfinite(U))):
        raise RecordingError(f'{path}: non-finite readings or commands')
    noise = _encoder_noise(counts_per_rev)
    extra = {}
    if gauges:
        bw = strain_bandwidth
        if bw is None:
            bw = float((design or {}).get('strain_bandwidth_hz', DEFAULTS['strain.bandwidth']))
        extra = _strain_channel(path, gauges, stamps, names, bw, period)
    if imus:
        bw = accel_bandwidth
        if bw is None:
            bw = float((design or {}).get('accel_bandwidth_hz', DEFAULTS['accelerometer.bandwidth']))
        extra.update(_accel_channel(path, imus, stamps, bw, period))
    return ClosedLoopRecord(period * 1e-9, tuple(names), U, Q, QD, kp, kv, noise, source=str(path),
                            t0=stamps[0] * 1e-9, delay=delay, law_position=LQ, law_velocity=LQD, **extra)


def _encoder_noise(counts_per_rev):
    from flexarm_sim.sensors import DEFAULTS
    counts = counts_per_rev or DEFAULTS['encoders.counts_per_rev']
    return (2 * math.pi / counts) / math.sqrt(12)


def _law_input(path, law, stamps, names, Q):
    """(q, qd) the law acted on at each reading (/flexarm/state), or (None, None) without that topic."""
    if not law:
        return None, None
    LQ, LQD = np.empty_like(Q), np.empty_like(Q)
    for k, s in enumerate(stamps):
        m = law.get(s)
        if m is None:
            raise RecordingError(f'{path}: {LAW_STATE}: no state at t = {s * 1e-9:.6f} s, where {JOINT_STATES} '
                                 'has one')
        try:
            idx = [list(m.joint_names).index(j) for j in names]
            LQ[k] = [m.position[i] for i in idx]
            LQD[k] = [m.velocity[i] for i in idx]
        except (ValueError, IndexError):
            raise RecordingError(f'{path}: {LAW_STATE} at t = {s * 1e-9:.6f} s lacks a position or velocity of '
                                 f'joints {", ".join(names)}') from None
    if not (np.all(np.isfinite(LQ)) and np.all(np.isfinite(LQD))):
        raise RecordingError(f'{path}: {LAW_STATE}: non-finite positions or velocities')
    return LQ, LQD


def _hardware_record(path, stamps, Q, QD, commands, law, applied, names, kp, kv, counts_per_rev):
    """A hardware bridge's recording: its readings when they were taken, each command from when the bridge wrote it
    (/flexarm/applied_effort: the torque the servos were told, at their current resolution, and the readings it
    answered), replayed with that timing (ClosedLoopRecord applied_at, sample_times)."""
    from flexarm_control.identification import ClosedLoopRecord
    n = len(names)
    if not applied:
        raise RecordingError(f'{path}: no {APPLIED} messages: a hardware recording needs the bridge\'s writes (when '
                             'each command reached the servos); were the servos enabled?')
    steps = np.diff(stamps)
    if not steps.size:
        raise RecordingError(f'{path}: {JOINT_STATES}: fewer than two samples')
    period = int(np.median(steps))
    if period <= 0 or np.any(steps > HARDWARE_GAP * period):
        k = int(np.argmax(steps))
        raise RecordingError(f'{path}: {JOINT_STATES} has a gap: {steps[k] * 1e-9:.6g} s between t = '
                             f'{stamps[k] * 1e-9:.6f} and {stamps[k + 1] * 1e-9:.6f} s (the bridge\'s period '
                             f'{period * 1e-9:.6g} s): the loop stalled or the bridge faulted')
    t0 = stamps[0]
    index = {s: k for k, s in enumerate(stamps)}
    U = np.zeros((len(stamps), n))
    at = np.full(len(stamps), np.nan)
    writes = sorted(applied, key=lambda w: w[0])            # (write stamp, command stamp, efforts)
    answered = [w for w in writes if w[1]]
    if not answered:
        raise RecordingError(f'{path}: {APPLIED}: no write of a stamped command (the controller\'s '
                             f'{COMMANDS}; an older bridge applies only the unstamped copy)')
    first, last = answered[0][0], answered[-1][0]
    for t_w, cs, effort in writes:
        if len(effort) != n or np.any(np.isnan(effort)):
            raise RecordingError(f'{path}: {APPLIED}.effort at t = {t_w * 1e-9:.6f} s is {list(effort)}: every joint '
                                 'must be torque-controlled (mode current) for the law to be replayed')
        if not cs:
            if first < t_w < last:
                raise RecordingError(f'{path}: {APPLIED}: at t = {t_w * 1e-9:.6f} s the bridge wrote a torque of its '
                                     'own (its soft position/velocity limits or its command watchdog): the law\'s '
                                     'loop was broken there; excite with a smaller --amplitude')
            continue
        k = index.get(cs)
        if k is None:
            raise RecordingError(f'{path}: {APPLIED}.command_stamp {cs * 1e-9:.6f} s is no reading of '
                                 f'{JOINT_STATES}')
        if np.isnan(at[k]):
            at[k] = (t_w - t0) * 1e-9
            U[k] = effort
    for k, s in enumerate(stamps):
        if np.isnan(at[k]) and s in commands and first <= s <= last:
            c = commands[s]
            U[k] = c.effort if len(c.effort) == n else 0.0
    LQ, LQD = _law_input(path, law, stamps, names, Q)
    if not (np.all(np.isfinite(Q)) and np.all(np.isfinite(QD)) and np.all(np.isfinite(U))):
        raise RecordingError(f'{path}: non-finite readings or commands')
    times = (np.asarray(stamps) - t0) * 1e-9
    return ClosedLoopRecord(period * 1e-9, tuple(names), U, Q, QD, kp, kv, _encoder_noise(counts_per_rev),
                            source=str(path), t0=t0 * 1e-9, law_position=LQ, law_velocity=LQD, applied_at=at,
                            sample_times=times)


def _strain_channel(path, gauges, stamps, joints, bandwidth, period_ns):
    """The strain fields of a ClosedLoopRecord from the /flexarm/strain messages at the readings' instants."""
    from flexarm_msgs.msg import LinkDeflection
    from flexarm_sim.model.sensing import gauge_spec
    from flexarm_sim.sensors import lowpass_alpha

    first = gauges.get(stamps[0])
    if first is None:
        raise RecordingError(f'{path}: {STRAIN}: no reading at t = {stamps[0] * 1e-9:.6f} s, where {JOINT_STATES} '
                             'has one (the gauges must be sampled with the joints: flexarm excite --sensors strain '
                             'does; --joints-only ignores them)')
    g = len(first.names)
    fields = ('link_names', 'positions', 'planes', 'distances', 'strain', 'variance')
    bad = [f for f in fields if len(getattr(first, f)) != g]
    if bad or not g:
        raise RecordingError(f'{path}: {STRAIN}.{(bad or ["names"])[0]} has {len(getattr(first, (bad or ["names"])[0]))}'
                             f' values for {g} gauges')
    texts = []
    for i in range(g):
        link = first.link_names[i]
        joint = link[:-len('_link')] if link.endswith('_link') else link
        if joint not in joints:
            raise RecordingError(f'{path}: {STRAIN}.link_names[{i}] = {link!r}: not a link of the arm\'s joints '
                                 f'{", ".join(joints)}')
        plane = {LinkDeflection.IN_PLANE: 'in_plane', LinkDeflection.OUT_OF_PLANE: 'out_of_plane'}.get(
            int(first.planes[i]))
        if plane is None:
            raise RecordingError(f'{path}: {STRAIN}.planes[{i}] = {first.planes[i]}: not IN_PLANE or OUT_OF_PLANE')
        texts.append(gauge_spec(joint, first.positions[i], plane, first.distances[i]))
    var = np.asarray(first.variance, dtype=float)
    if not np.all(np.isfinite(var) & (var > 0)):
        raise RecordingError(f'{path}: {STRAIN}.variance is {list(var)}: the gauges\' noise is needed to weigh them '
                             'against the joints (--joints-only fits without them)')
    S = np.empty((len(stamps), g))
    for k, s in enumerate(stamps):
        m = gauges.get(s)
        if m is None:
            raise RecordingError(f'{path}: {STRAIN}: no reading at t = {s * 1e-9:.6f} s, where {JOINT_STATES} has one')
        if list(m.names) != list(first.names) or len(m.strain) != g:
            raise RecordingError(f'{path}: {STRAIN}: the gauges change at t = {s * 1e-9:.6f} s')
        S[k] = m.strain
    if not np.all(np.isfinite(S)):
        raise RecordingError(f'{path}: {STRAIN}.strain: non-finite readings')
    if not (math.isfinite(bandwidth) and bandwidth >= 0):
        raise RecordingError(f'strain bandwidth must be >= 0 Hz, got {bandwidth}')
    return {'strain': S, 'gauges': tuple(texts), 'strain_noise': np.sqrt(var),
            'strain_alpha': lowpass_alpha(bandwidth, 1e9 / period_ns)}


def _accel_channel(path, imus, stamps, bandwidth, period_ns):
    """The accelerometer fields of a ClosedLoopRecord from the /flexarm/tip_imu messages at the readings' instants
    (linear acceleration, tip frame; its covariance's diagonal the noise)."""
    from flexarm_sim.sensors import lowpass_alpha

    A = np.empty((len(stamps), 3))
    first = None
    for k, s in enumerate(stamps):
        m = imus.get(s)
        if m is None:
            raise RecordingError(f'{path}: {TIP_IMU}: no reading at t = {s * 1e-9:.6f} s, where {JOINT_STATES} has '
                                 'one (the accelerometer must be sampled with the joints: flexarm excite --sensors '
                                 'strain_accel does; --joints-only ignores it)')
        first = first or m
        A[k] = (m.linear_acceleration.x, m.linear_acceleration.y, m.linear_acceleration.z)
    if not np.all(np.isfinite(A)):
        raise RecordingError(f'{path}: {TIP_IMU}.linear_acceleration: non-finite readings')
    cov = np.asarray(first.linear_acceleration_covariance, dtype=float)
    var = cov[[0, 4, 8]] if cov.size == 9 else np.full(3, np.nan)
    if not np.all(np.isfinite(var) & (var > 0)):
        raise RecordingError(f'{path}: {TIP_IMU}.linear_acceleration_covariance has diagonal {list(var)}: the '
                             'accelerometer\'s noise is needed to weigh it against the joints (--joints-only fits '
                             'without it)')
    if not (math.isfinite(bandwidth) and bandwidth >= 0):
        raise RecordingError(f'accelerometer bandwidth must be >= 0 Hz, got {bandwidth}')
    return {'accel': A, 'accel_noise': np.sqrt(var), 'accel_alpha': lowpass_alpha(bandwidth, 1e9 / period_ns)}


def _frequencies(spec, n=3):
    from flexarm_sim.model import load_model, whole_arm_modes
    model = load_model(spec)
    return whole_arm_modes(model, model.spec.nominal_configuration).elastic_frequencies_hz[:n]


def _vector_arg(text, what):
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(',')]
    except ValueError:
        raise RecordingError(f'{what}: expected numbers separated by commas, got {text!r}') from None


def _write_arm(path, result, sources):
    import yaml

    from flexarm_sim.model.spec import load_arm
    lines = [f'# Calibrated by `flexarm identify` from {", ".join(os.path.basename(s) for s in sources)}',
             f'# (output error, cost {result.cost:.4g} in noise units; {result.message}).',
             '# parameter: nominal -> estimate +- standard error']
    for i, name in enumerate(result.names):
        if result.identifiable[i]:
            lines.append(f'#   {name}: {result.nominal[i]:.6g} -> {result.estimate[i]:.6g} +- '
                         f'{result.std_error[i]:.2g} {result.units[i]}'.rstrip())
        else:
            lines.append(f'#   {name}: {result.nominal[i]:.6g} kept (not identifiable: {result.why_not[name]})')
    for i, name in enumerate(result.names):
        if name.endswith('.torque_scale') or name.endswith('.encoder_offset'):
            lines.append(f'# {name} is not an arm-file field: apply it to the drive (bridge) configuration')
    text = '\n'.join(lines) + '\n' + yaml.safe_dump(result.arm_dict, sort_keys=False)
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        f.write(text)
    load_arm(tmp)                           # the calibrated file is a valid arm file, or nothing is written
    os.replace(tmp, path)


def _plot(path, records, result):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    from flexarm_control.identification.output_error import ACCEL_CHANNELS, accel_of, replay_record, strain_of
    from flexarm_sim.model import load_model
    model = load_model(result.spec)
    rec = records[0]
    q, Z, ZD, TAU = replay_record(model, rec, result.scale, result.offset, delay=result.delay)
    t = rec.t0 + (rec.sample_times if rec.sample_times is not None else rec.dt * np.arange(rec.samples))
    meas, pred, labels = [rec.position], [q], [(name, 'rad', 1.0, 1e3, 'mrad') for name in rec.joint_names]
    if rec.strain is not None:
        s = strain_of(model, rec, Z)
        meas.append(rec.strain)
        pred.append(s + (rec.strain - s).mean(axis=0))          # each gauge's bias fitted
        labels += [(g.split('@')[0] + ' gauge', 'µε', 1e6, 1e6, 'µε') for g in rec.gauges]
    if rec.accel is not None:
        a = accel_of(model, rec, Z, ZD, TAU)
        meas.append(rec.accel)
        pred.append(a + (rec.accel - a).mean(axis=0))          # each axis' bias fitted
        labels += [(c, 'm/s²', 1.0, 1e3, 'mm/s²') for c in ACCEL_CHANNELS]
    meas, pred = np.hstack(meas), np.hstack(pred)
    n = meas.shape[1]
    fig, axes = plt.subplots(2 * n, 1, figsize=(10, 3 * n + 1), sharex=True)
    for j, (name, unit, v, k, small) in enumerate(labels):
        ax = axes[2 * j]
        ax.plot(t, v * meas[:, j], 'k-', lw=0.8, label='measured')
        ax.plot(t, v * pred[:, j], 'C1--', lw=0.8, label='calibrated model')
        ax.set_ylabel(f'{name} [{unit}]')
        ax.legend(loc='upper right', fontsize=8)
        axes[2 * j + 1].plot(t, k * (pred[:, j] - meas[:, j]), 'C3-', lw=0.6)
        axes[2 * j + 1].set_ylabel(f'residual [{small}]')
    axes[-1].set_xlabel('t [s]')
    fig.suptitle(f'{result.spec.name}: {os.path.basename(rec.source)}')
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def identify_main(args):
    from flexarm_control.identification import FitError, RecordError, identify, predict
    from flexarm_sim.arms import resolve_arm
    from flexarm_sim.common.params import ConfigError
    from flexarm_sim.model import load_model
    from flexarm_sim.model.spec import ArmSpecError

    say = (lambda line: print(line, file=sys.stderr, flush=True)) if not args.json else (lambda line: None)
    try:
        path = resolve_arm(args.arm, 'arm')
        spec = load_model(path).spec
        kp, kv = _vector_arg(args.kp, '--kp'), _vector_arg(args.kv, '--kv')
        kw = {'strain': not args.joints_only, 'strain_bandwidth': args.strain_bandwidth,
              'accel': not args.joints_only, 'accel_bandwidth': args.accel_bandwidth}
        records = [read_record(p, spec, args.counts_per_rev, kp, kv, **kw) for p in args.recordings]
        held = [read_record(p, spec, args.counts_per_rev, kp, kv, **kw) for p in args.holdout]
        if args.output and os.path.abspath(args.output) in {os.path.abspath(p) for p in args.recordings}:
            raise RecordingError(f'-o {args.output}: that is a recording')
        for rec in records:
            say(f'{rec.source}: {rec.duration:.2f} s at {1 / rec.dt:.0f} Hz, {len(rec.joint_names)} joints'
                + (f', strain gauges {", ".join(rec.gauges)}' if rec.strain is not None else '')
                + (', tip accelerometer' if rec.accel is not None else '')
                + (f', commands {rec.delay} period(s) after their readings' if rec.delay else ''))
        result = identify(spec, records, args.fit, max_iter=args.max_iter, progress=say)
    except (ConfigError, RecordingError, RecordError, FitError, ArmSpecError, OSError) as e:
        print(f'flexarm identify: {e}', file=sys.stderr)
        return 2
    holdout = [(rec, predict(result.spec, rec, result.scale, result.offset,
                             result.delay if rec.applied_at is not None else 0.0)[1]) for rec in held]
    f_nom, f_cal = _frequencies(spec), _frequencies(result.spec)
    written = None
    if args.output and result.converged:
        try:
            _write_arm(args.output, result, args.recordings)
            written = os.path.abspath(args.output)
        except (ArmSpecError, OSError) as e:
            print(f'flexarm identify: the calibrated arm file was not written: {e}', file=sys.stderr)
            return 2
    if args.plot:
        _plot(args.plot, records, result)
    report = {
        'arm': spec.name, 'recordings': [r.source for r in records], 'converged': result.converged,
        'message': result.message, 'iterations': result.iterations, 'seconds': round(result.seconds, 2),
        'replays': result.evaluations, 'cost': result.cost, 'cost_nominal': result.cost_nominal,
        'parameters': {name: {'nominal': float(result.nominal[i]), 'estimate': float(result.estimate[i]),
                              'std_error': (None if not np.isfinite(result.std_error[i])
                                            else float(result.std_error[i])),
                              'unit': result.units[i], 'identifiable': bool(result.identifiable[i]),
                              **({'why_not': result.why_not[name]} if name in result.why_not else {})}
                       for i, name in enumerate(result.names)},
        'nrmse': {rec.source: dict(zip(rec.channels, map(float, e))) for rec, e in zip(records, result.nrmse)},
        'holdout_nrmse': {rec.source: dict(zip(rec.channels, map(float, e))) for rec, e in holdout},
        'frequencies_hz': {'nominal': [float(x) for x in f_nom], 'calibrated': [float(x) for x in f_cal]},
        'output': written, 'misfit': result.misfit, 'correlation_time': result.correlation_time}
    if args.json:
        print(json.dumps(report))
    else:
        print(result.table())
        print(f'{result.message} after {result.iterations} iteration(s), {result.evaluations} replays, '
              f'{result.seconds:.1f} s; cost {result.cost:.4g} (nominal arm {result.cost_nominal:.4g}) in noise units')
        for rec, e in zip(records, result.nrmse):
            print(f'fit NRMSE {os.path.basename(rec.source)}: ' +
                  ', '.join(f'{j} {100 * x:.2f} %' for j, x in zip(rec.channels, e)))
        for rec, e in holdout:
            print(f'held-out NRMSE {os.path.basename(rec.source)}: ' +
                  ', '.join(f'{j} {100 * x:.2f} %' for j, x in zip(rec.channels, e)))
        print('whole-arm frequencies (Hz, joints free): nominal ' + ', '.join(f'{x:.4g}' for x in f_nom)
              + '; calibrated ' + ', '.join(f'{x:.4g}' for x in f_cal))
        if result.misfit:
            print(f'warning: {result.misfit}')
        if written:
            print(f'calibrated arm file: {written}')
        elif args.output:
            print(f'flexarm identify: {args.output} not written: the fit did not converge', file=sys.stderr)
    return 0 if result.converged else NOT_CONVERGED_EXIT_CODE
