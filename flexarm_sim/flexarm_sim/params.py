"""Moved to flexarm_sim.common.params (kept until the hardware bridge imports it from there)."""
from .common.params import (ConfigError, boolean, choice, float_list, float_range, integer, number,  # noqa: F401
                            string)
