"""Node `flex_joint_states`: /flexarm/state (FlexState) -> joint_states of the real + virtual joints.

The URDF of `flexarm urdf` (flexarm_bringup.urdf_gen) splits each flexible link into K rigid cells joined
by virtual joints; this node computes their angles from the links' modal coordinates (difference of the
mode section rotations at the cell ends, FlexJointMap) so robot_state_publisher + rviz's RobotModel show
the bending arm. Angular rates of the virtual joints come from the modal rates the same way.

Parameters (read-only): `arm` (YAML path or name of a file in config/arms; must be the plant's arm),
`segments` (K, must equal the URDF's; default 8).
Topics: subscribes `/flexarm/state`; publishes `joint_states` (sensor_msgs/JointState, reliable). The
plant publishes /joint_states with the real joints for the controllers; to keep that topic clean,
view.launch.py remaps this node's output and robot_state_publisher's input to
/flexarm/urdf_joint_states.

Messages whose links do not match the arm (unknown link, wrong number of modal coordinates) are dropped
with a throttled warning.
"""
from __future__ import annotations

import sys

import numpy as np

from flexarm_bringup.urdf_gen import FlexJointMap, resolve_arm


class FlexJointStateMapper:
    """FlexState -> (names, positions, velocities) for the URDF's movable joints (no ROS here)."""

    def __init__(self, arm, segments=8):
        self.map = FlexJointMap(resolve_arm(arm) if isinstance(arm, str) else arm, segments)
        spec = self.map.model.spec
        self.joint_names = list(self.map.joint_names)
        self.real_names = list(self.map.real_names)
        self.link_names = [js.name + '_link' for js in spec.joints]
        self.n_modes = list(self.map.n_modes)

    def convert(self, msg):
        """(positions, velocities) arrays in self.joint_names order; ValueError if msg does not fit."""
        index = {n: i for i, n in enumerate(msg.joint_names)}
        try:
            idx = [index[n] for n in self.real_names]
        except KeyError as e:
            raise ValueError(f'joint {e.args[0]!r} missing from the state') from None
        pos = np.asarray(msg.position, float)
        vel = np.asarray(msg.velocity, float)
        q = pos[idx] if pos.size == len(msg.joint_names) else None
        if q is None:
            raise ValueError('position has a different length than joint_names')
        qd = vel[idx] if vel.size == len(msg.joint_names) else np.zeros(len(idx))
        links = {lk.link_name: lk for lk in msg.links}
        deltas, rates = [], []
        for name, m in zip(self.link_names, self.n_modes):
            if m == 0:
                deltas.append(np.zeros(0))
                rates.append(np.zeros(0))
                continue
            lk = links.get(name)
            if lk is None:
                raise ValueError(f'link {name!r} missing from the state')
            d = np.asarray(lk.modal_position, float)
            if d.size != m:
                raise ValueError(f'link {name!r}: {d.size} modal coordinates, the arm has {m}')
            r = np.asarray(lk.modal_velocity, float)
            deltas.append(d)
            rates.append(r if r.size == m else np.zeros(m))
        return self.map.positions(q, deltas), self.map.positions(qd, rates)


def main(argv=None):
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.node import Node
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from flexarm_msgs.msg import FlexState

    class FlexJointStates(Node):
        def __init__(self):
            super().__init__('flex_joint_states')
            arm = self.declare_parameter('arm', 'deluca_two_link').value
            segments = int(self.declare_parameter('segments', 8).value)
            self.mapper = FlexJointStateMapper(arm, segments)
            qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
            self.pub = self.create_publisher(JointState, 'joint_states', qos)
            self.sub = self.create_subscription(FlexState, '/flexarm/state', self.on_state, qos)
            self.get_logger().info(f'arm {arm}, K = {segments}: {len(self.mapper.joint_names)} joints '
                                   f'({len(self.mapper.real_names)} real)')

        def on_state(self, msg):
            try:
                pos, vel = self.mapper.convert(msg)
            except ValueError as e:
                self.get_logger().warn(f'state dropped: {e}', throttle_duration_sec=5.0)
                return
            out = JointState()
            out.header.stamp = msg.header.stamp
            out.name = self.mapper.joint_names
            out.position = pos.tolist()
            out.velocity = vel.tolist()
            self.pub.publish(out)

    rclpy.init(args=argv if argv is not None else sys.argv)
    node = None
    try:
        node = FlexJointStates()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):     # Ctrl-C, SIGTERM (launch shutdown)
        pass
    except Exception as e:          # bad parameters: report and exit non-zero
        print(f'flex_joint_states: {e}', file=sys.stderr)
        return 1
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
