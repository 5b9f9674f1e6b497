"""Start, spin and stop a flexarm node: the one `main` of every node executable.

    def plant(args=None):                       # console script `plant` (flexarm_sim/entry.py)
        return run_node('flexarm_sim.plant.node:PlantNode', 'plant', args)

Shutdown: SIGINT and SIGTERM at any time — during imports, while the kernels load or compile, while the node is
constructed, while it spins — end the process with exit code 0 and no traceback within a fraction of a second
(what `ros2 launch` and process supervisors expect). rclpy's own signal handlers are not installed: they shut the
context down under the node's threads (publishing from a thread after that raises inside rclpy), whereas here
the node stops first (`node.stop()`: its threads joined, hardware made safe), then the executor, the node and
the context, in that order. During construction the signal raises `Stop` (common/signals.py) in the main thread, which
unwinds it; while spinning the executor wakes at least every 0.1 s to look at the flag.

The factory may be given as 'module:attribute' so that the signal handlers are in place before the heavy
imports (rclpy, numpy, numba) start: the entry-point modules import nothing else at their top.

`exit_process(code)` ends the process right after that, without the interpreter's finalization (it tears down
the numba/LLVM, scipy and rclpy object graphs one by one: 0.5-1.5 s measured, most of a node's exit time); every
resource that matters (threads, hardware, DDS participant, logging) is closed by then.

Start-up errors the node can name (`ConfigError`: a bad parameter or arm file) print one line naming the
parameter and exit 2; so does DDS-Security requested (ROS_SECURITY_ENABLE=true) where the DDS has none
(dds_security.py: never silently unprotected). Other exceptions are bugs and keep their traceback.
"""
from __future__ import annotations

import os
import sys

from ..common.params import ConfigError
from ..common.signals import Stop, StopSignals, held

SPIN_WAKE_S = 0.1


def default_executor():
    """A maker of rclpy's SingleThreadedExecutor (built where no start-up signal cuts it in half) for the nodes'
    services, parameters, timers and cold topics. (rclpy's
    experimental EventsExecutor is 3x cheaper per callback but deadlocks when another thread publishes while it spins
    — verified; the plant's loop thread publishes — so the hot topics are served by ros/hotpath.py instead.)"""
    from rclpy.executors import SingleThreadedExecutor

    def make():
        with held():            # not cut in half by a start-up signal (Executor has a __del__: common/signals.held)
            return SingleThreadedExecutor()
    return make


def _resolve(factory):
    if isinstance(factory, str):
        import importlib
        module, _, attr = factory.partition(':')
        return getattr(importlib.import_module(module), attr)
    return factory


def run_node(factory, name: str, args=None, executor_factory=None) -> int:
    """Run `factory()` (a Node, optionally with start()/stop(); or 'module:attr' naming it) until SIGINT/SIGTERM;
    returns the exit code."""
    node = executor = rclpy = None
    code = 0
    sig = StopSignals().install()
    try:                                # a signal from here on raises Stop until sig.started()
        print(f'{name}: starting', file=sys.stderr, flush=True)
        import rclpy
        from rclpy.signals import SignalHandlerOptions
        from .dds_security import refusal
        from ..common.scheduler import freeze_start_up_objects
        why = refusal()                 # security requested but not available: never run unprotected
        if why:
            print(f'{name}: {why}', file=sys.stderr, flush=True)
            return 2
        factory = _resolve(factory)
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
        node = factory()
        executor = (executor_factory or default_executor())()
        executor.add_node(node)
        freeze_start_up_objects()       # before the node's real-time threads start (common/scheduler.py)
        start = getattr(node, 'start', None)
        if start is not None:
            start()
        sig.started()
        while not sig.stopped and rclpy.ok():
            executor.spin_once(timeout_sec=SPIN_WAKE_S)
    except Stop:
        code = 0
    except ConfigError as e:
        print(f'{name}: {e}', file=sys.stderr, flush=True)
        code = 2
    except Exception:                   # noqa: BLE001 - re-raised unless a stop signal caused it
        # Stop raised inside a C extension's module initialization comes out as "ImportError: initialization
        # failed" (measured: SIGINT 0.8 s into the modal node's start-up, 1 in 18): it was asked to stop
        if not sig.stopped:
            raise
        code = 0
    finally:
        sig.started()                   # a second signal during teardown is ignored
        if node is not None:
            stop = getattr(node, 'stop', None)
            if stop is not None:
                stop()
        if executor is not None:
            executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        if rclpy is not None:
            rclpy.try_shutdown()
    return code


def log_at(logger, level: str, message: str) -> None:
    """The runtimes' log(level, message) ('error' | 'warn' | 'info') on an rclpy logger; one call site per severity
    (rclpy ties a severity to its call site)."""
    if level == 'error':
        logger.error(message)
    elif level == 'warn':
        logger.warning(message)
    else:
        logger.info(message)


def exit_process(code: int):
    """Flush stdout/stderr and end the process now (after run_node has shut everything down)."""
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    os._exit(int(code))
