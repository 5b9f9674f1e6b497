"""`flexarm urdf <arm.yaml> [-K 8] [-o out.urdf]`: URDF of an arm with virtual joints for link deflection.

Each flexible link becomes K rigid cells joined by virtual joints (see flexarm_bringup.urdf_gen); the node
`flex_joint_states` publishes their angles from /flexarm/state so robot_state_publisher and rviz's
RobotModel display show the bending arm.
"""
from flexarm_bringup import urdf_gen


def add_parser(sub):
    p = sub.add_parser('urdf', help='URDF of an arm description (flexible links as K rigid cells + virtual joints)')
    urdf_gen.add_arguments(p)
    p.set_defaults(func=urdf_gen.run)
