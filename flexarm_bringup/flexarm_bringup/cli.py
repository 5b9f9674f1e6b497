"""`flexarm` — the user-facing command of the project.

Subcommands are registered by small modules (one job each); this file only dispatches:
  flexarm run    simulate an arm under a controller (ROS 2 nodes), summary/plot/recording (runner.py)
  flexarm modes  link and whole-arm natural frequencies (modes_cmd.py)
  flexarm urdf   URDF with virtual joints for the flexible links (urdf_cmd.py)
"""
import argparse
import sys

from flexarm_bringup import modes_cmd, runner, urdf_cmd


def build_parser():
    parser = argparse.ArgumentParser(prog='flexarm', description='flexarm: flexible-link robot arm simulator')
    sub = parser.add_subparsers(dest='command', required=True)
    runner.add_parser(sub)
    modes_cmd.add_parser(sub)
    urdf_cmd.add_parser(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == '__main__':
    sys.exit(main())
