"""Run plots from plain arrays (matplotlib, Agg backend, PNG): no ROS, no model needed.

`plot_run(path, t, q, q_ref=None, tau=None, tip_deflection=None, modal=None, ...)` draws up to four
stacked panels sharing the time axis:

1. joint angles q (solid) against their references q_ref (dashed, same colour), rad;
2. joint torques tau, N m;
3. tip deflection(s), mm — (T,) one curve, (T, k) k curves (e.g. per link, or x/y/z components);
4. modal coordinates, (T, m).

Panels whose data is None (or has no columns) are left out. Shapes: t (T,); q, q_ref, tau (T, n) or (T,).
Returns the path written.
"""
from __future__ import annotations

import numpy as np


def _as_2d(a, T, name):
    if a is None:
        return None
    a = np.asarray(a, dtype=float)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[0] != T:
        raise ValueError(f'{name}: expected shape ({T},) or ({T}, k), got {a.shape}')
    return a if a.shape[1] else None


def _labels(given, n, default):
    if given is not None:
        given = list(given)
        if len(given) != n:
            raise ValueError(f'expected {n} labels, got {len(given)}')
        return given
    return [f'{default}{i + 1}' for i in range(n)]


def plot_run(path, t, q, q_ref=None, tau=None, tip_deflection=None, modal=None, *, joint_names=None,
             tip_labels=None, modal_labels=None, title=None, dpi=110):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    t = np.asarray(t, dtype=float).ravel()
    T = t.size
    if T == 0:
        raise ValueError('no samples')
    q = _as_2d(q, T, 'q')
    q_ref = _as_2d(q_ref, T, 'q_ref')
    tau = _as_2d(tau, T, 'tau')
    tip = _as_2d(tip_deflection, T, 'tip_deflection')
    modal = _as_2d(modal, T, 'modal')
    n = q.shape[1] if q is not None else (tau.shape[1] if tau is not None else 0)
    if q_ref is not None and q is not None and q_ref.shape[1] != q.shape[1]:
        raise ValueError(f'q_ref has {q_ref.shape[1]} columns, q has {q.shape[1]}')
    names = _labels(joint_names, n, 'q') if n else []

    panels = [p for p, d in (('q', q if q is not None else q_ref), ('tau', tau), ('tip', tip),
                             ('modal', modal)) if d is not None]
    if not panels:
        raise ValueError('nothing to plot')
    fig, axes = plt.subplots(len(panels), 1, sharex=True, figsize=(8, 2.3 * len(panels) + 0.6), squeeze=False)
    axes = axes[:, 0]
    colours = plt.rcParams['axes.prop_cycle'].by_key()['color']
    for ax, panel in zip(axes, panels):
        if panel == 'q':
            for i in range(n):
                c = colours[i % len(colours)]
                if q is not None:
                    ax.plot(t, q[:, i], color=c, label=names[i])
                if q_ref is not None:
                    ax.plot(t, q_ref[:, i], color=c, ls='--', lw=1.0,
                            label=f'{names[i]} ref' if q is not None else names[i])
            ax.set_ylabel('joint angle [rad]')
        elif panel == 'tau':
            for i in range(tau.shape[1]):
                ax.plot(t, tau[:, i], color=colours[i % len(colours)],
                        label=names[i] if i < len(names) else f'tau{i + 1}')
            ax.set_ylabel('torque [N m]')
        elif panel == 'tip':
            labels = _labels(tip_labels, tip.shape[1], 'tip ')
            for i in range(tip.shape[1]):
                ax.plot(t, 1e3 * tip[:, i], label=labels[i])
            ax.set_ylabel('tip deflection [mm]')
        else:
            labels = _labels(modal_labels, modal.shape[1], 'δ')
            for i in range(modal.shape[1]):
                ax.plot(t, modal[:, i], label=labels[i])
            ax.set_ylabel('modal coordinate')
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(fontsize=7, ncol=min(4, len(handles)), loc='best')
    axes[-1].set_xlabel('time [s]')
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def plot_tip_run(path, t, tip, tip_desired, tau=None, relative_deflection=None, validity_limit=None, *,
                 joint_names=None, link_names=None, t_move=0.0, title=None, dpi=110):
    """The run judged at the tip: the desired and the actual tip path in the plane of the motion (the two axes with
    the largest travel), the tip error |p - p_d| (mm), the joint torques and each link's tip deflection over its
    length against the model's validity limit. t in s (the move starts at t_move); tip, tip_desired (T, 3) m."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    t = np.asarray(t, dtype=float).ravel()
    T = t.size
    if T == 0:
        raise ValueError('no samples')
    tip, tip_desired = np.asarray(tip, dtype=float), np.asarray(tip_desired, dtype=float)
    if tip.shape != (T, 3) or tip_desired.shape != (T, 3):
        raise ValueError(f'tip and tip_desired: expected shape ({T}, 3)')
    tau = _as_2d(tau, T, 'tau')
    rd = _as_2d(relative_deflection, T, 'relative_deflection')
    axes_xy = np.argsort(-np.ptp(tip_desired, axis=0))[:2]
    axes_xy.sort()
    lab = 'xyz'
    fig = plt.figure(figsize=(11, 7.5))
    grid = fig.add_gridspec(3, 2, width_ratios=(1.0, 1.25))
    ax_path = fig.add_subplot(grid[:, 0])
    ax_path.plot(tip_desired[:, axes_xy[0]], tip_desired[:, axes_xy[1]], 'k--', lw=1.2, label='desired tip path')
    ax_path.plot(tip[:, axes_xy[0]], tip[:, axes_xy[1]], lw=1.0, label='tip')
    ax_path.set_xlabel(f'{lab[axes_xy[0]]} [m]')
    ax_path.set_ylabel(f'{lab[axes_xy[1]]} [m]')
    ax_path.set_aspect('equal', adjustable='datalim')
    ax_path.legend(loc='best', fontsize=8)
    ts = t - t_move
    ax_err = fig.add_subplot(grid[0, 1])
    ax_err.plot(ts, 1e3 * np.linalg.norm(tip - tip_desired, axis=1))
    ax_err.set_ylabel('tip error [mm]')
    ax_tau = fig.add_subplot(grid[1, 1], sharex=ax_err)
    if tau is not None:
        names = _labels(joint_names, tau.shape[1], 'tau')
        for i in range(tau.shape[1]):
            ax_tau.plot(ts, tau[:, i], label=names[i])
        ax_tau.legend(loc='best', fontsize=8)
    ax_tau.set_ylabel('torque [N m]')
    ax_def = fig.add_subplot(grid[2, 1], sharex=ax_err)
    if rd is not None:
        names = _labels(link_names, rd.shape[1], 'link')
        for i in range(rd.shape[1]):
            ax_def.plot(ts, 100 * rd[:, i], label=names[i])
        if validity_limit is not None:
            ax_def.axhline(100 * validity_limit, color='r', ls=':', lw=1.0, label='model validity')
        ax_def.legend(loc='best', fontsize=8)
    ax_def.set_ylabel('tip deflection [% of length]')
    ax_def.set_xlabel('time from the start of the move [s]')
    for ax in (ax_err, ax_tau, ax_def):
        ax.grid(True, alpha=0.3)
    ax_path.grid(True, alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
