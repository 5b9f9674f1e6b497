"""plots.plot_run writes a non-empty PNG from plain arrays; bad shapes are rejected."""
import numpy as np
import pytest

from flexarm_bringup.plots import plot_run

PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def _data(T=200):
    t = np.linspace(0.0, 2.0, T)
    q_ref = np.stack([np.sin(t), 0.5 * np.cos(t)], axis=1)
    q = q_ref + 0.01 * np.sin(20 * t)[:, None]
    tau = np.stack([np.cos(t), -np.sin(t)], axis=1)
    tip = 1e-3 * np.sin(6 * t)
    modal = np.stack([1e-3 * np.sin(3 * t), 1e-4 * np.sin(11 * t), 2e-3 * np.cos(5 * t)], axis=1)
    return t, q, q_ref, tau, tip, modal


def test_writes_png(tmp_path):
    t, q, q_ref, tau, tip, modal = _data()
    out = plot_run(tmp_path / 'run.png', t, q, q_ref, tau, tip, modal, joint_names=['shoulder', 'elbow'],
                   title='test run')
    data = (tmp_path / 'run.png').read_bytes()
    assert out == tmp_path / 'run.png'
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_optional_panels_and_1d(tmp_path):
    t, q, _, _, tip, _ = _data(50)
    plot_run(tmp_path / 'q.png', t, q[:, 0])
    plot_run(tmp_path / 'tip.png', t, None, tip_deflection=np.stack([tip, -tip], axis=1), modal=np.zeros((50, 0)))
    assert (tmp_path / 'q.png').read_bytes().startswith(PNG_MAGIC)
    assert (tmp_path / 'tip.png').stat().st_size > 1000


def test_shape_errors(tmp_path):
    t, q, q_ref, *_ = _data(20)
    with pytest.raises(ValueError):
        plot_run(tmp_path / 'x.png', t, q[:10])
    with pytest.raises(ValueError):
        plot_run(tmp_path / 'x.png', t, q, q_ref[:, :1])
    with pytest.raises(ValueError):
        plot_run(tmp_path / 'x.png', t, None)
    assert not (tmp_path / 'x.png').exists()
