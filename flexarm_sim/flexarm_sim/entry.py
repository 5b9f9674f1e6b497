"""Console scripts of flexarm_sim (setup.py entry points).

Nothing heavy is imported at the top of this module: run_node installs the SIGINT/SIGTERM handlers before rclpy,
numpy and numba load, so a signal during start-up ends the process cleanly (ros/node_main.py).
"""
import sys

from .ros.node_main import exit_process, run_node


def plant(args=None):
    """`plant`: the flexible-arm plant node (plant/node.py)."""
    sys.setswitchinterval(0.0002)       # the loop thread gets the interpreter back quickly
    exit_process(run_node('flexarm_sim.plant.node:PlantNode', 'plant', args))


def precompile(args=None):
    """`precompile [arm]`: compile every numba kernel once (make setup runs it; colcon users once after a build)."""
    from .precompile import main        # here, not at the top: the entry module stays light
    return main(args)


if __name__ == '__main__':
    sys.exit({'plant': plant, 'precompile': precompile}[sys.argv[1]](sys.argv[2:] or None)
             if len(sys.argv) > 1 else 2)
