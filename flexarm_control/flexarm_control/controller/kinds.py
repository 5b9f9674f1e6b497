"""The controller kinds: one registration per controller (no heavy imports: setup.py and the launch files read it).

Adding a controller: a law class in laws/ with its `GAINS` (parameter table rows) and `from_params` (see
laws/base.py), and one line here. The node (`ros2 run flexarm_control <kind>`), its parameters, the shipped
controllers.yaml, the launch choices and `flexarm run --controller` follow from it.
"""
CONTROLLERS = {
    'pd_servo': 'flexarm_control.laws.pd:PDServo',
    'modal': 'flexarm_control.laws.modal:ModalLQR',
    'computed_torque': 'flexarm_control.laws.computed_torque:ComputedTorque',
    'tip_tracking': 'flexarm_control.laws.tip_tracking:TipTracking',
}
KINDS = tuple(CONTROLLERS)
# a controller's `shaping` of its reference (laws/shaping.py: SHAPERS): the node parameter's, the launch files' and
# `flexarm run`'s choices
SHAPINGS = ('none', 'zv', 'zvd')


def law_class(kind):
    """The law class of a controller kind."""
    import importlib
    if kind not in CONTROLLERS:
        raise ValueError(f'unknown controller {kind!r}; choose one of {KINDS}')
    module, name = CONTROLLERS[kind].split(':')
    return getattr(importlib.import_module(module), name)
