"""`flexarm` — the user-facing command of the project.

Subcommands are registered by small modules (one job each); this file only dispatches:
  flexarm run    simulate an arm under a controller (ROS 2 nodes), summary/plot/recording (runner.py)
  flexarm excite design a safe identification experiment and run it, recording (excite_cmd.py)
  flexarm identify  calibrate an arm file's parameters to recordings of experiments (identify_cmd.py)
  flexarm modes  link and whole-arm natural frequencies (modes_cmd.py)
  flexarm urdf   URDF with virtual joints for the flexible links (urdf_cmd.py)
  flexarm security  SROS2 keystore of a bring-up: create, verify; status of DDS-Security here (security.py)
SIGINT/SIGTERM end any subcommand with 130/143 and no traceback (interrupt.py): the handlers are installed before
the subcommand modules (numpy, rclpy, numba) are imported.
"""
import argparse
import sys

from flexarm_bringup import interrupt


def build_parser():
    from flexarm_bringup import (excite_cmd, identify_cmd, modes_cmd, runner, security,   # after the signal handlers
                                 urdf_cmd)                                            # (module docstring)
    parser = argparse.ArgumentParser(prog='flexarm', description='flexarm: flexible-link robot arm simulator')
    sub = parser.add_subparsers(dest='command', required=True)
    runner.add_parser(sub)
    excite_cmd.add_parser(sub)
    identify_cmd.add_parser(sub)
    modes_cmd.add_parser(sub)
    urdf_cmd.add_parser(sub)
    security.add_parser(sub)
    return parser


def main(argv=None):
    interrupt.install()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args) or 0
    except interrupt.Interrupted as e:
        print(f'flexarm: interrupted ({e.name})', file=sys.stderr)
        return e.exit_code


if __name__ == '__main__':
    sys.exit(main())
