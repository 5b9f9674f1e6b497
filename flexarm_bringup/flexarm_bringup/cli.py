"""`flexarm` — the user-facing command of the project.

Subcommands are registered by small modules (one job each); this file only dispatches.
"""
import argparse
import sys

from flexarm_bringup import modes_cmd, urdf_cmd


def _add_demo(sub):
    p = sub.add_parser('demo', help='run the main demonstration (what `make demo` runs)')
    p.set_defaults(func=_run_demo)


def _run_demo(args):
    from flexarm_bringup import demo
    return demo.main()


def build_parser():
    parser = argparse.ArgumentParser(prog='flexarm', description='flexarm: flexible-link robot arm simulator')
    sub = parser.add_subparsers(dest='command', required=True)
    _add_demo(sub)
    modes_cmd.add_parser(sub)
    urdf_cmd.add_parser(sub)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args) or 0


if __name__ == '__main__':
    sys.exit(main())
