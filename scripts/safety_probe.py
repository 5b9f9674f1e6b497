"""Probe the safety envelope as a tester would (issue 18's table, re-measurable): start the plant and the modal
controller exactly as `ros2 launch flexarm_bringup sim.launch.py controller:=modal` does, then feed absurd inputs
over DDS and print a table: input / fault, expected, observed.

    python scripts/safety_probe.py            (after `make setup`; . ./env.sh)
"""
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import rclpy
from builtin_interfaces.msg import Duration
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from flexarm_bringup.bringup import command, sim_nodes
from flexarm_msgs.msg import FlexState
from flexarm_msgs.srv import SetState
from flexarm_sim.model import ArmSpecError, arm_from_dict, load_model
from flexarm_sim.model.spec import load_arm
from flexarm_sim.arms import resolve_arm

ROWS = []


def row(what, expected, observed):
    observed = ' '.join(str(observed).split())
    ROWS.append((what, expected, observed))
    print(f'| {what} | {expected} | {observed} |', flush=True)


class Probe:
    def __init__(self, domain):
        self.ctx = rclpy.Context()
        rclpy.init(context=self.ctx, domain_id=domain)
        self.node = rclpy.create_node('safety_probe', context=self.ctx)
        self.ex = rclpy.executors.SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.states, self.diags = [], {}
        self.node.create_subscription(FlexState, '/flexarm/state', self.states.append, 1000)
        from diagnostic_msgs.msg import DiagnosticArray
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._diag, 100)
        self.ref = self.node.create_publisher(JointTrajectory, '/flexarm/reference', 10)
        self.cmd = self.node.create_publisher(Float64MultiArray, '/effort_controller/commands', 10)

    def _diag(self, msg):
        for st in msg.status:
            self.diags[st.name] = {kv.key: kv.value for kv in st.values}

    def spin(self, seconds):
        t = time.monotonic() + seconds
        while time.monotonic() < t:
            self.ex.spin_once(timeout_sec=0.01)

    def until(self, pred, seconds=60.0):
        t = time.monotonic() + seconds
        while time.monotonic() < t and not pred():
            self.ex.spin_once(timeout_sec=0.02)
        return pred()

    def call(self, srv, name, req):
        cli = self.node.create_client(srv, name)
        self.until(cli.service_is_ready, 30.0)
        fut = cli.call_async(req)
        self.until(fut.done, 30.0)
        return fut.result()

    def setp(self, node, name, value):
        if isinstance(value, list):
            pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE_ARRAY, double_array_value=value)
        else:
            pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=float(value))
        r = self.call(SetParameters, f'/{node}/set_parameters',
                      SetParameters.Request(parameters=[Parameter(name=name, value=pv)]))
        return r.results[0]

    def reference(self, positions, t=1.0):
        msg = JointTrajectory(joint_names=['shoulder', 'elbow'])
        msg.points = [JointTrajectoryPoint(positions=list(positions), velocities=[0.0, 0.0],
                                           time_from_start=Duration(sec=int(t), nanosec=int((t % 1) * 1e9)))]
        self.ref.publish(msg)


def main():
    domain = 70 + os.getpid() % 20
    env = dict(os.environ, ROS_DOMAIN_ID=str(domain), ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST')
    tmp = tempfile.mkdtemp()
    print('| input / fault | expected | observed |\n|---|---|---|')
    procs = [subprocess.Popen(command(s, tmp), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for s in sim_nodes('deluca_two_link', 'modal', 'realtime')]
    p = Probe(domain)
    try:
        p.until(lambda: 'flexarm_control/modal' in p.diags and len(p.states) > 50, 120.0)
        rej = lambda: int(p.diags['flexarm_control/modal']['references_rejected'])  # noqa: E731
        for label, pos in (('reference [1e308, 0]', [1e308, 0.0]), ('reference beyond the joint limit [3.5, 0]',
                                                                     [3.5, 0.0]),
                           ('reference [nan, 0]', [math.nan, 0.0])):
            n0 = rej()
            p.reference(pos)
            p.until(lambda: rej() > n0, 10.0)
            alive = procs[1].poll() is None
            row(label, 'refused, previous reference kept, controller alive',
                f'refused ({rej() - n0}), controller {"alive" if alive else "DEAD"}: '
                f'"{p.diags["flexarm_control/modal"]["last_reject_reason"][:70]}"')
        r = p.setp('plant', 'effort_limits', [math.inf, math.inf])
        row('effort_limits [inf, inf] at run time', 'refused naming it', f'{"refused" if not r.successful else "ACCEPTED"}: {r.reason[:80]}')
        r = p.setp('plant', 'effort_limits', [5.0, 5.0])
        row('effort_limits [5, 5] (arm file: 2 N m)', 'refused (only tightening)', f'{"refused" if not r.successful else "ACCEPTED"}: {r.reason[:80]}')
        for name, v in (('publish_rates.joint_states', 2.0 ** 62), ('lockstep.republish_period', 1e-12),
                        ('publish_rates.diagnostics', 1e9)):
            r = p.setp('plant', name, v)
            row(f'{name} = {v:g}', 'refused naming it', f'{"refused" if not r.successful else "ACCEPTED"}: {r.reason[:80]}')
        for label, req in (('reset to position [100, 0]', SetState.Request(position=[100.0, 0.0])),
                           ('reset to position [1e308, 0]', SetState.Request(position=[1e308, 0.0])),
                           ('reset to velocity [1e308, 0]', SetState.Request(position=[0.0, 0.0],
                                                                             velocity=[1e308, 0.0]))):
            r = p.call(SetState, '/flexarm/reset', req)
            row(label, 'refused with a clear message', f'{"refused" if not r.success else "ACCEPTED"}: {r.message[:80]}')
        # controller off: garbage torques at 1 kHz for 10 s against the +-pi joint limits
        procs[1].terminate()
        procs[1].wait(10)
        p.call(SetState, '/flexarm/reset', SetState.Request(to_initial=True))
        rng = np.random.default_rng(0)
        p.states.clear()
        t_end = time.monotonic() + 10.0
        k = 0
        while time.monotonic() < t_end:
            if k % 200 == 0:
                sign = rng.choice([-1.0, 1.0], 2)
            p.cmd.publish(Float64MultiArray(data=list(2.0 * sign)))
            k += 1
            p.spin(0.001)
        q = np.array([m.position for m in p.states])
        qd = np.array([m.velocity for m in p.states])
        row('+-2 N m garbage torques, 10 s (joint limits +-pi, 10 rad/s)', 'joint stays within its stop (+ stated '
            'penetration); velocity-limit violations reported',
            f'max |q| {np.max(np.abs(q)):.3f} rad, max |qd| {np.max(np.abs(qd)):.1f} rad/s; plant diag: '
            + ', '.join(f'{k}={v}' for k, v in p.diags.get('flexarm plant', {}).items()
                        if 'limit' in k or 'stop' in k or k == 'diverged'))
        p.cmd.publish(Float64MultiArray(data=[1e300, -1e300]))
        p.until(lambda: p.states and list(p.states[-1].effort) == [2.0, -2.0], 5.0)
        p.diags.pop('flexarm plant', None)
        p.until(lambda: 'flexarm plant' in p.diags, 5.0)
        row('command [1e300, -1e300]', 'clamped to the effort limits, counted',
            f'applied {list(p.states[-1].effort)}, commands_clamped {p.diags.get("flexarm plant", {}).get("commands_clamped")}')
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.terminate()
                pr.wait(10)
    # arm files
    spec = load_arm(resolve_arm('deluca_two_link'))
    from flexarm_sim.model.spec import arm_to_dict
    for label, mutate in (('arm file payload.mass 1e308', lambda d: d['payload'].__setitem__('mass', 1e308)),
                          ('arm file joints[0].link.length 1e308',
                           lambda d: d['joints'][0]['link'].__setitem__('length', 1e308)),
                          ('arm file hub inertia 1e-300', lambda d: d['joints'][1]['hub'].__setitem__('inertia', 1e-300))):
        d = arm_to_dict(spec)
        mutate(d)
        t0 = time.monotonic()
        try:
            load_model(arm_from_dict(d))
            got = 'ACCEPTED'
        except ArmSpecError as e:
            got = f'refused in {1e3 * (time.monotonic() - t0):.0f} ms: {str(e)[:70]}'
        except Exception as e:  # noqa: BLE001
            got = f'BARE {type(e).__name__}: {e}'
        row(label, 'refused naming the field, no hang', got)
    return 0


if __name__ == '__main__':
    sys.exit(main())
