"""Node `flex_joint_states`: /flexarm/state (FlexState) -> joint_states of the real + virtual joints.

The URDF of `flexarm urdf` (flexarm_bringup.urdf_gen) splits each flexible link into K rigid cells joined
by virtual joints; this node computes their angles from the links' modal coordinates (difference of the
mode section rotations at the cell ends, FlexJointMap) so robot_state_publisher + rviz's RobotModel show
the bending arm. Angular rates of the virtual joints come from the modal rates the same way.

Parameters (read-only, TABLE): `arm` (name of a shipped arm or a YAML path; must be the plant's: states of
another arm are refused), `segments` (K, must equal the URDF's; default 8).
Topics: subscribes `/flexarm/state` (decoded by flexarm_sim.ros.flexstate, one tolerance rule: states that do not
fit the arm are dropped with a throttled warning); publishes `joint_states` (sensor_msgs/JointState, reliable). The
plant publishes /joint_states with the real joints for the controllers; to keep that topic clean,
view.launch.py remaps this node's output and robot_state_publisher's input to /flexarm/urdf_joint_states.
"""
from __future__ import annotations

import sys

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState

from flexarm_msgs.msg import FlexState
from flexarm_sim.arms import arm_id, resolve_arm
from flexarm_sim.common.params import Param, ParamTable, integer, string
from flexarm_sim.model.layout import ArmLayout
from flexarm_sim.ros import names
from flexarm_sim.ros.flexstate import decode_state
from flexarm_sim.ros.parameters import NodeParams, warn_unmatched_params_files

from .urdf_gen import FlexJointMap

TABLE = ParamTable('flex_joint_states', {
    'arm': Param('deluca_two_link', string(), 'arm description (name of a shipped arm or a YAML path): the plant\'s'),
    'segments': Param(8, integer(lo=0, hi=100), 'rigid cells per flexible link: the URDF\'s -K'),
})


class FlexJointStateMapper:
    """FlexState -> (positions, velocities) of the URDF's movable joints, in `joint_names` order (no ROS here)."""

    def __init__(self, arm, segments=8):
        path = resolve_arm(arm) if isinstance(arm, str) else None
        self.map = FlexJointMap(path or arm, segments)
        model = self.map.model
        self.layout = ArmLayout.of(model, arm_id(path, model.spec.name) if path else '')
        self.joint_names = list(self.map.joint_names)
        self.real_names = list(self.map.real_names)

    def convert(self, msg):
        """(positions, velocities) arrays; ValueError if msg does not fit the arm (codec's rule)."""
        st = decode_state(msg, self.layout)
        if not st.has_modes and self.layout.n_modes:
            raise ValueError('state without modal coordinates (joints only): the links cannot be drawn')
        return self.map.positions_from_z(st.z), self.map.positions_from_z(st.zd)


class FlexJointStates(Node):
    def __init__(self, **kw):
        super().__init__('flex_joint_states', **kw)
        warn_unmatched_params_files(self)
        self.params = NodeParams(self, TABLE)
        self.mapper = FlexJointStateMapper(self.params['arm'], self.params['segments'])
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.pub = self.create_publisher(JointState, 'joint_states', qos)
        self.create_subscription(FlexState, names.STATE, self.on_state, qos)
        self.dropped = 0
        self.get_logger().info(f'arm {self.mapper.layout.arm_name}, K = {self.params["segments"]}: '
                               f'{len(self.mapper.joint_names)} joints ({len(self.mapper.real_names)} real)')

    def on_state(self, msg):
        try:
            pos, vel = self.mapper.convert(msg)
        except ValueError as e:
            self.dropped += 1
            self.get_logger().warning(f'state dropped: {e} ({self.dropped} so far)', throttle_duration_sec=5.0)
            return
        out = JointState()
        out.header.stamp = msg.header.stamp
        out.name = self.mapper.joint_names
        out.position = pos.tolist()
        out.velocity = vel.tolist()
        self.pub.publish(out)


if __name__ == '__main__':
    from .entry import flex_joint_states
    sys.exit(flex_joint_states())
