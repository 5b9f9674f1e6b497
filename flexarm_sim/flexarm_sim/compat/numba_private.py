"""numba internals: LLVM settings for one compilation, a compiled kernel's entry address, a call through it.

* ``numba.core.config.OPT`` (an ``_OptLevel``) and ``LOOP_VECTORIZE``: numba reads them when it compiles; the
  kernels set them for their own compilations (kernels.kernel: -O2 without the loop vectorizer) under numba's
  compiler lock and restore them.
* ``Dispatcher.overloads[sig].library.get_pointer_to_function(fndesc.llvm_func_name)``: the machine address of a
  compiled specialization; with ``context.call_conv`` (numba's calling convention) an intrinsic calls it
  indirectly (kernels.call_dynamics_terms, call_step), so a caller's compilation does not inline and re-optimise
  the dynamics (one compiled copy).
"""
from __future__ import annotations

import contextlib

from . import CompatError


@contextlib.contextmanager
def compile_settings(opt: int, loop_vectorize: int):
    """numba's global LLVM settings for the compilations inside the block (the caller holds the compiler lock)."""
    from numba.core import config
    try:
        saved = config.OPT, config.LOOP_VECTORIZE
        config.OPT = config._OptLevel(opt)
    except AttributeError as exc:
        raise CompatError('numba', 'numba.core.config.OPT / _OptLevel / LOOP_VECTORIZE', str(exc)) from exc
    config.LOOP_VECTORIZE = loop_vectorize
    try:
        yield
    finally:
        config.OPT, config.LOOP_VECTORIZE = saved


def compiler_lock():
    """numba's global compiler lock (a context manager)."""
    try:
        from numba.core.compiler_lock import global_compiler_lock
    except ImportError as exc:
        raise CompatError('numba', 'numba.core.compiler_lock.global_compiler_lock', str(exc)) from exc
    return global_compiler_lock


def entry_address(dispatcher, sig) -> int:
    """The machine address of the dispatcher's compiled specialization for the signature `sig` (compiled
    already)."""
    try:
        cres = dispatcher.overloads[sig]
        return int(cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name))
    except (AttributeError, KeyError) as exc:
        raise CompatError('numba', 'Dispatcher.overloads[sig].library.get_pointer_to_function(fndesc.'
                                   'llvm_func_name)', repr(exc)) from exc


def call_through_address(ret, args):
    """An intrinsic's codegen calling the function at its first argument (an int64 address) with the rest, typed
    `args`, returning `ret` (numba types; types.none for none), in numba's own calling convention."""
    from numba.core import types

    def codegen(context, builder, signature, llargs):
        fnty = context.call_conv.get_function_type(ret, args)
        fn = builder.inttoptr(llargs[0], fnty.as_pointer())
        _, res = context.call_conv.call_function(builder, fn, ret, args, llargs[1:])
        return context.get_dummy_value() if ret == types.none else res
    return codegen


def check() -> None:
    """Compile a kernel under compile_settings, take its address and call it through an intrinsic; CompatError
    naming what fails."""
    from numba import njit, types
    from numba.extending import intrinsic

    def twice(x):
        return 2.0 * x

    target = njit(twice)
    with compiler_lock(), compile_settings(2, 0):
        target.compile((types.float64,))
    addr = entry_address(target, (types.float64,))
    if addr == 0:
        raise CompatError('numba', 'get_pointer_to_function', 'the address of a compiled function is 0')

    @intrinsic
    def call(typingctx, a, x):
        return types.float64(types.int64, types.float64), call_through_address(types.float64, (types.float64,))

    @njit
    def through(a, x):
        return call(a, x)

    try:
        got = through(addr, 1.25)
    except Exception as exc:  # noqa: BLE001 - any failure of the calling convention is the finding
        raise CompatError('numba', 'context.call_conv.get_function_type / call_function', repr(exc)) from exc
    if got != 2.5:
        raise CompatError('numba', 'context.call_conv (an indirect call)', f'2 x 1.25 came back as {got}')
