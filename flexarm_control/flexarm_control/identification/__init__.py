"""Calibrating the model to an arm (no ROS): the experiment (experiment.py), the parameters a fit may move
(parameters.py) and output-error identification on the package's own nonlinear model (output_error.py)."""
from .experiment import Excitation, ExcitationError, check_excitation, design_excitation, holding_gains, run_offline
from .output_error import (ClosedLoopRecord, Identification, RecordError, identifiability, identify, nrmse,
                           predict)
from .parameters import FitError, ParameterSet

__all__ = ['Excitation', 'ExcitationError', 'check_excitation', 'design_excitation', 'holding_gains', 'run_offline',
           'ClosedLoopRecord', 'Identification', 'RecordError', 'identifiability', 'identify', 'nrmse', 'predict', 'FitError',
           'ParameterSet']
