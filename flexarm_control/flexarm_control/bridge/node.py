"""``hardware_bridge`` entry point: ``main()`` runs :class:`ros_node.BridgeNode` (the node's topics,
services and threads are documented there).

SIGINT / SIGTERM end the process with exit code 0 and no traceback at any time after ``main()``
starts: during the imports and the node's construction (bridge.shutdown.StopSignals raises there),
while connecting or reconnecting, and while running (the executor is spun in 0.1 s slices and
checks the stop flag; rclpy's own signal handlers are not installed, so nothing shuts the context
down under the bus thread). This module imports only the standard library at the top, so the
handlers are in place before rclpy is loaded (~0.5 s).
"""
import sys

from .shutdown import StopSignals


def main(args=None):
    signals = StopSignals()
    rclpy = node = executor = None
    try:
        signals.install()
        print('hardware_bridge: starting', file=sys.stderr, flush=True)
        import rclpy
        from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        from .config import ConfigError
        from .ros_node import BridgeNode
        sys.setswitchinterval(0.0005)
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        try:
            node = BridgeNode()
        except (ConfigError, ValueError) as e:
            print(f'hardware_bridge: {e}', file=sys.stderr, flush=True)
            return 2
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        node.start()
        signals.started()
        try:
            while not signals.stopped:
                executor.spin_once(timeout_sec=0.1)
        except ExternalShutdownException:
            pass
    except BaseException:
        if not signals.stopped:        # else: the stop signal's Stop, or what it became inside an import
            raise
    finally:
        signals.started()              # a second signal does not interrupt the clean-up
        if node is not None:
            node.stop()                # bus thread, torque off, port
        if executor is not None:
            executor.shutdown()
        if node is not None:
            node.destroy_node()
        if rclpy is not None:
            rclpy.try_shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
