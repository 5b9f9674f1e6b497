"""Whole-arm finite-element cross-check of the linearized natural frequencies of the De Luca arm.

An independent planar frame FE model of the whole two-link arm (Hermite bending elements + axial bars,
inextensibility imposed as constraints, element matrices rotated into the configuration; hub 1 inertia on
the link-1 root rotation, joint 1 pinned; joint 2 a hinge at the tip of link 1 sharing the translations
with hub 2's mass on it and Jh2 on link 2's root rotation; payload mass and inertia at the tip of link 2)
is compared with `whole_arm_modes` of the assumed-modes model, for free joints (zero torque: two rigid
modes at 0 Hz are dropped) and for clamped joints (a clamped frame).

Run with -s to print the comparison and the convergence of the modal model with modes per link.
Measured (40 elements per link, inextensible):
  theta2 = 0    FE 1.41986 2.64734 16.1170 22.1257 Hz;  2 modes/link: 0.0007 %, 0.0007 %, 0.010 %, +32.4 %
                3 modes/link: 3e-5 %, 7e-5 %, 6e-4 %, 0.13 %;  4 modes/link: ... 0.0087 %
  theta2 = pi/2 FE 1.42100 2.51277 15.9501 22.1050 Hz;  same pattern (2 modes: 4th +32.4 %)
The 2-modes-per-link model has only four elastic DOF; its fourth frequency (29.3 Hz) is a poor
approximation of the FE's 22.1 Hz mode, so the issue's "next two within 5 %" needs >= 3 modes per link.
"""

import numpy as np
import pytest
import scipy.linalg

from flexarm_sim.model import arm_from_dict, load_arm, load_model, whole_arm_modes
from flexarm_sim.model.spec import arm_to_dict
from flexarm_sim.arms import resolve_arm

ARM = resolve_arm('deluca_two_link')

# De Luca & Siciliano (DESIGN.md §5)
L1 = L2 = 0.5
MU = 0.2
EI = 1.0
JH1, MH2, JH2, MP, JP = 0.1, 1.0, 0.1, 0.1, 0.0005
THETAS = (0.0, np.pi / 2)


# ------------------------------------------------------------------------------------------ FE model
def _frame_element(le, ei, ea, mu):
    """Local stiffness and consistent mass of a planar frame element, dofs (u1, v1, t1, u2, v2, t2)."""
    k = np.zeros((6, 6))
    m = np.zeros((6, 6))
    ax, bd = [0, 3], [1, 2, 4, 5]
    k[np.ix_(ax, ax)] = ea / le * np.array([[1.0, -1.0], [-1.0, 1.0]])
    m[np.ix_(ax, ax)] = mu * le / 6.0 * np.array([[2.0, 1.0], [1.0, 2.0]])
    L = le
    k[np.ix_(bd, bd)] = ei / L ** 3 * np.array([[12, 6 * L, -12, 6 * L], [6 * L, 4 * L * L, -6 * L, 2 * L * L],
                                                [-12, -6 * L, 12, -6 * L], [6 * L, 2 * L * L, -6 * L, 4 * L * L]])
    m[np.ix_(bd, bd)] = mu * L / 420.0 * np.array([[156, 22 * L, 54, -13 * L], [22 * L, 4 * L * L, 13 * L, -3 * L * L],
                                                   [54, 13 * L, 156, -22 * L],
                                                   [-13 * L, -3 * L * L, -22 * L, 4 * L * L]])
    return k, m


def _rotation(phi):
    """Global -> local dof transformation of a frame element at angle phi."""
    c, s = np.cos(phi), np.sin(phi)
    r = np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])
    T = np.zeros((6, 6))
    T[:3, :3] = r
    T[3:, 3:] = r
    return T


def whole_arm_fe(theta2, n_el=40, EA=None, clamped=False):
    """Natural frequencies (Hz, ascending) of the planar FE model of the whole De Luca arm at (0, theta2).

    EA=None imposes inextensibility exactly (constraints: equal axial displacement of all nodes of a link);
    otherwise axial bars of stiffness EA. clamped=True locks both joints (link-1 root rotation fixed,
    link-2 root rotation = link-1 tip rotation)."""
    count = [0]

    def dof():
        count[0] += 1
        return count[0] - 1

    n1 = [[dof(), dof(), dof()] for _ in range(n_el + 1)]
    tip1 = n1[-1]
    n2 = [[tip1[0], tip1[1], tip1[2] if clamped else dof()]] + [[dof(), dof(), dof()] for _ in range(n_el)]
    N = count[0]
    K = np.zeros((N, N))
    M = np.zeros((N, N))
    for nodes, length, phi in ((n1, L1, 0.0), (n2, L2, theta2)):
        k, m = _frame_element(length / n_el, EI, 0.0 if EA is None else EA, MU)
        T = _rotation(phi)
        kg, mg = T.T @ k @ T, T.T @ m @ T
        for e in range(n_el):
            idx = nodes[e] + nodes[e + 1]
            K[np.ix_(idx, idx)] += kg
            M[np.ix_(idx, idx)] += mg
    M[n1[0][2], n1[0][2]] += JH1                 # hub 1 on link 1's root rotation
    M[tip1[0], tip1[0]] += MH2                   # hub 2 mass on the shared hinge node
    M[tip1[1], tip1[1]] += MH2
    M[n2[0][2], n2[0][2]] += JH2                 # hub 2 inertia rotates with link 2's root
    M[n2[-1][0], n2[-1][0]] += MP                # payload at link 2's tip
    M[n2[-1][1], n2[-1][1]] += MP
    M[n2[-1][2], n2[-1][2]] += JP
    rows = []

    def constrain(coeffs):
        r = np.zeros(N)
        for i, c in coeffs:
            r[i] += c
        rows.append(r)

    constrain([(n1[0][0], 1.0)])                 # joint 1 pinned
    constrain([(n1[0][1], 1.0)])
    if clamped:
        constrain([(n1[0][2], 1.0)])
    if EA is None:
        for nodes, phi in ((n1, 0.0), (n2, theta2)):
            c, s = np.cos(phi), np.sin(phi)
            for nd in nodes[1:]:
                constrain([(nd[0], c), (nd[1], s), (nodes[0][0], -c), (nodes[0][1], -s)])
    T = scipy.linalg.null_space(np.array(rows))
    Kr, Mr = T.T @ K @ T, T.T @ M @ T
    w2 = scipy.linalg.eigh(0.5 * (Kr + Kr.T), 0.5 * (Mr + Mr.T), eigvals_only=True)
    return np.sqrt(np.clip(w2, 0.0, None)) / (2 * np.pi)


def fe_elastic(theta2, clamped=False, **kw):
    f = whole_arm_fe(theta2, clamped=clamped, **kw)
    if clamped:
        return f
    assert np.all(f[:2] < 0.02) and f[2] > 0.5, f[:4]   # two rigid-body modes (joint 1, the hinge)
    return f[2:]


# ------------------------------------------------------------------------------------------ modal model
_models = {}


def deluca_model(modes_per_link=2):
    if modes_per_link not in _models:
        d = arm_to_dict(load_arm(ARM))      # the shipped De Luca arm, with the number of modes set here
        for j in d['joints']:
            j['link']['modes']['in_plane'] = modes_per_link
            j['link']['damping_ratio'] = 0.0
        _models[modes_per_link] = load_model(arm_from_dict(d))
    return _models[modes_per_link]


def modal_elastic(theta2, modes_per_link=2, clamped=False):
    am = whole_arm_modes(deluca_model(modes_per_link), [0.0, theta2], free_joints=not clamped)
    if not clamped:
        assert am.n_rigid == 2
        return am.elastic_frequencies_hz
    return am.frequencies_hz


def _err(a, b):
    return (np.asarray(a) / np.asarray(b) - 1.0) * 100.0


# ------------------------------------------------------------------------------------------ FE sanity
@pytest.mark.parametrize('theta2', THETAS)
def test_fe_model_is_converged_and_insensitive_to_EA(theta2):
    ref = fe_elastic(theta2, n_el=80)[:4]
    f40 = fe_elastic(theta2, n_el=40)[:4]
    assert np.max(np.abs(f40 / ref - 1)) < 1e-5
    print(f'\nFE theta2={theta2:.4f}: elements/link  f1..f4 (Hz)')
    for ne in (5, 10, 20, 40, 80):
        print(f'  {ne:3d}  ' + ' '.join(f'{x:10.5f}' for x in fe_elastic(theta2, n_el=ne)[:4]))
    print('  EA (N)   f1..f4 (Hz), penalty bars instead of inextensibility constraints')
    for EA in (1e4, 1e6, 1e8):
        print(f'  {EA:7.0e} ' + ' '.join(f'{x:10.5f}' for x in fe_elastic(theta2, n_el=40, EA=EA)[:4]))
    # large EA converges to the constrained (inextensible) model
    assert np.max(np.abs(fe_elastic(theta2, n_el=40, EA=1e8)[:4] / f40 - 1)) < 1e-5
    assert np.max(np.abs(fe_elastic(theta2, n_el=40, EA=1e6)[:4] / f40 - 1)) < 1e-4


def test_fe_element_reproduces_cantilever_roots():
    """FE sanity: a clamped-free link of the same element gives the cantilever roots of DESIGN.md §5."""
    n_el, length = 40, L1
    k, m = _frame_element(length / n_el, EI, 0.0, MU)
    bd = [1, 2, 4, 5]
    k, m = k[np.ix_(bd, bd)], m[np.ix_(bd, bd)]
    N = 2 * (n_el + 1)
    K, M = np.zeros((N, N)), np.zeros((N, N))
    for e in range(n_el):
        K[2 * e:2 * e + 4, 2 * e:2 * e + 4] += k
        M[2 * e:2 * e + 4, 2 * e:2 * e + 4] += m
    w2 = scipy.linalg.eigh(K[2:, 2:], M[2:, 2:], eigvals_only=True)[:4]
    beta_l = np.array([1.87510407, 4.69409113, 7.85475744, 10.99554073])
    exact = beta_l ** 2 / (2 * np.pi * length ** 2) * np.sqrt(EI / MU)
    assert np.allclose(np.sqrt(w2) / (2 * np.pi), exact, rtol=1e-5)


# ------------------------------------------------------------------------------------------ the issue
@pytest.mark.parametrize('theta2', THETAS)
def test_free_joint_frequencies_match_fe(theta2):
    """Issue: joints free, first two elastic frequencies within 1 %, next two within 5 % of the FE."""
    fe = fe_elastic(theta2)[:4]
    rows = {}
    for nm in (1, 2, 3, 4):
        f = modal_elastic(theta2, nm)[:4]
        rows[nm] = f
    print(f'\nfree joints, theta2 = {theta2:.4f} rad: whole-arm elastic frequencies (Hz), error vs FE (%)')
    print('  model          f1          f2          f3          f4')
    print('  FE 40/link ' + ''.join(f'{x:12.5f}' for x in fe))
    for nm, f in rows.items():
        e = _err(f, fe[:f.size])
        print(f'  {nm} modes/link' + ''.join(f'{x:12.5f}' for x in f) + '   err%: '
              + ' '.join(f'{x:+.2e}' for x in e))
    # the shipped 2-modes-per-link model: first three within tolerance; its fourth (measured +32 %) is not
    e2 = np.abs(_err(rows[2], fe))
    assert np.all(e2[:2] <= 1.0) and e2[2] <= 5.0
    # with 3 modes per link the tolerances hold for all four
    e3 = np.abs(_err(rows[3], fe))
    assert np.all(e3[:2] <= 1.0) and np.all(e3[2:4] <= 5.0), e3
    # and the modal model converges towards the FE with more modes
    e4 = np.abs(_err(rows[4], fe))
    assert e4[3] < e3[3] < e2[3]
    assert np.all(e4 <= 0.05)


@pytest.mark.parametrize('theta2', THETAS)
def test_clamped_joint_frequencies_match_fe(theta2):
    """Independent check: both joints locked, the FE model is a clamped frame; 2 modes per link."""
    fe = fe_elastic(theta2, clamped=True)[:4]
    f2 = modal_elastic(theta2, 2, clamped=True)
    f3 = modal_elastic(theta2, 3, clamped=True)[:4]
    print(f'\nclamped joints, theta2 = {theta2:.4f} rad (Hz): FE ' + ' '.join(f'{x:.5f}' for x in fe))
    print('  2 modes/link ' + ' '.join(f'{x:.5f}' for x in f2) + '  err% '
          + ' '.join(f'{x:+.1e}' for x in _err(f2, fe)))
    print('  3 modes/link ' + ' '.join(f'{x:.5f}' for x in f3) + '  err% '
          + ' '.join(f'{x:+.1e}' for x in _err(f3, fe)))
    e = np.abs(_err(f2, fe))
    assert np.all(e[:2] <= 1.0) and np.all(e[2:] <= 5.0)
    assert np.all(e <= 0.05)          # measured <= 0.01 %
