"""Dynamixel X-series control table (Protocol 2.0) and per-model units.

Only the items flexarm uses are listed.  Addresses/sizes follow the ROBOTIS
e-manual for XM430-W350 / XM540-W270 (identical layout across the X series
for these items).  Unit constants differ per model and live in
:data:`MODELS`.

The state read uses ONE contiguous block, :data:`STATE_BLOCK_START` ..
``+ STATE_BLOCK_LEN`` (126..146 inclusive, 21 bytes): Present Current,
Present Velocity, Present Position, Velocity/Position Trajectory, Present
Input Voltage, Present Temperature.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, NamedTuple


class Item(NamedTuple):
    address: int
    size: int
    signed: bool = False
    eeprom: bool = False
    writable: bool = True


# EEPROM area (writable only with torque off) -------------------------------
MODEL_NUMBER = Item(0, 2, eeprom=True, writable=False)
MODEL_INFORMATION = Item(2, 4, eeprom=True, writable=False)
FIRMWARE_VERSION = Item(6, 1, eeprom=True, writable=False)
ID = Item(7, 1, eeprom=True)
BAUD_RATE = Item(8, 1, eeprom=True)
RETURN_DELAY_TIME = Item(9, 1, eeprom=True)
DRIVE_MODE = Item(10, 1, eeprom=True)
OPERATING_MODE = Item(11, 1, eeprom=True)
PROTOCOL_TYPE = Item(13, 1, eeprom=True)
HOMING_OFFSET = Item(20, 4, signed=True, eeprom=True)
TEMPERATURE_LIMIT = Item(31, 1, eeprom=True)
MAX_VOLTAGE_LIMIT = Item(32, 2, eeprom=True)
MIN_VOLTAGE_LIMIT = Item(34, 2, eeprom=True)
PWM_LIMIT = Item(36, 2, eeprom=True)
CURRENT_LIMIT = Item(38, 2, eeprom=True)
VELOCITY_LIMIT = Item(44, 4, eeprom=True)
MAX_POSITION_LIMIT = Item(48, 4, eeprom=True)
MIN_POSITION_LIMIT = Item(52, 4, eeprom=True)
SHUTDOWN = Item(63, 1, eeprom=True)
EEPROM_END = 64  # addresses < 64 are EEPROM

# RAM area ---------------------------------------------------------------------
TORQUE_ENABLE = Item(64, 1)
LED = Item(65, 1)
STATUS_RETURN_LEVEL = Item(68, 1)
REGISTERED_INSTRUCTION = Item(69, 1, writable=False)
HARDWARE_ERROR_STATUS = Item(70, 1, writable=False)
VELOCITY_I_GAIN = Item(76, 2)
VELOCITY_P_GAIN = Item(78, 2)
POSITION_D_GAIN = Item(80, 2)
POSITION_I_GAIN = Item(82, 2)
POSITION_P_GAIN = Item(84, 2)
BUS_WATCHDOG = Item(98, 1, signed=True)   # 0 off / clear, 1..127 armed (x 20 ms), -1 expired (firmware v38+)
GOAL_PWM = Item(100, 2, signed=True)
GOAL_CURRENT = Item(102, 2, signed=True)
GOAL_VELOCITY = Item(104, 4, signed=True)
PROFILE_ACCELERATION = Item(108, 4)
PROFILE_VELOCITY = Item(112, 4)
GOAL_POSITION = Item(116, 4, signed=True)
REALTIME_TICK = Item(120, 2, writable=False)
MOVING = Item(122, 1, writable=False)
MOVING_STATUS = Item(123, 1, writable=False)
PRESENT_PWM = Item(124, 2, signed=True, writable=False)
PRESENT_CURRENT = Item(126, 2, signed=True, writable=False)
PRESENT_VELOCITY = Item(128, 4, signed=True, writable=False)
PRESENT_POSITION = Item(132, 4, signed=True, writable=False)
VELOCITY_TRAJECTORY = Item(136, 4, signed=True, writable=False)
POSITION_TRAJECTORY = Item(140, 4, signed=True, writable=False)
PRESENT_INPUT_VOLTAGE = Item(144, 2, writable=False)
PRESENT_TEMPERATURE = Item(146, 1, writable=False)
TABLE_SIZE = 147 + 1  # bytes an emulator needs for the items above (147 backup ready)

READ_ONLY_RANGES = ((0, 7), (69, 71), (120, 148))  # [start, end) half-open
GOAL_VALUES = (GOAL_PWM.address, GOAL_POSITION.address + GOAL_POSITION.size)   # [100, 120): read-only once expired

# Bus Watchdog (98), e-Manual "Bus Watchdog(98)": armed with 1..127 (unit 20 ms) it stops the servo when no
# instruction packet arrived for longer than that while Torque Enable is 1; it then reads -1 and the Goal
# values (100..119) refuse writes with a Data Range Error until 0 is written (0 also disarms it).
BUS_WATCHDOG_UNIT_S = 0.020
BUS_WATCHDOG_MAX = 127
BUS_WATCHDOG_EXPIRED = -1
BUS_WATCHDOG_MIN_FIRMWARE = 38

# Safety block, polled every hardware_status_period cycles: Hardware Error Status (70) .. Bus Watchdog (98)
HARDWARE_STATUS_PERIOD = 50      # reads between safety-block polls: the bridge parameter's and ServoBusConfig's default
SAFETY_BLOCK_START = HARDWARE_ERROR_STATUS.address
SAFETY_BLOCK_LEN = BUS_WATCHDOG.address + BUS_WATCHDOG.size - SAFETY_BLOCK_START   # 29

# Contiguous state block ---------------------------------------------------------
STATE_BLOCK_START = PRESENT_CURRENT.address
STATE_BLOCK_LEN = PRESENT_TEMPERATURE.address + PRESENT_TEMPERATURE.size - STATE_BLOCK_START  # 21

# Operating modes (address 11) -----------------------------------------------------
MODE_CURRENT = 0
MODE_VELOCITY = 1
MODE_POSITION = 3
MODE_EXTENDED_POSITION = 4
MODE_CURRENT_BASED_POSITION = 5
MODE_PWM = 16
VALID_MODES = (MODE_CURRENT, MODE_VELOCITY, MODE_POSITION, MODE_EXTENDED_POSITION,
               MODE_CURRENT_BASED_POSITION, MODE_PWM)
MODE_BY_NAME = {
    "current": MODE_CURRENT,
    "velocity": MODE_VELOCITY,
    "position": MODE_POSITION,
    "extended_position": MODE_EXTENDED_POSITION,
    "current_position": MODE_CURRENT_BASED_POSITION,
    "pwm": MODE_PWM,
}

# Hardware Error Status (address 70) bits -------------------------------------------
HW_INPUT_VOLTAGE = 0x01
HW_OVERHEATING = 0x04
HW_MOTOR_ENCODER = 0x08
HW_ELECTRICAL_SHOCK = 0x10
HW_OVERLOAD = 0x20
HW_ERROR_NAMES = {
    HW_INPUT_VOLTAGE: "input voltage",
    HW_OVERHEATING: "overheating",
    HW_MOTOR_ENCODER: "motor encoder",
    HW_ELECTRICAL_SHOCK: "electrical shock",
    HW_OVERLOAD: "overload",
}
DEFAULT_SHUTDOWN = HW_OVERHEATING | HW_ELECTRICAL_SHOCK | HW_OVERLOAD  # 0x34 = 52


def describe_hw_error(bits: int) -> str:
    names = [n for b, n in HW_ERROR_NAMES.items() if bits & b]
    return ", ".join(names) if names else "none"


# Per-model units -----------------------------------------------------------------
@dataclass(frozen=True)
class ModelUnits:
    """Unit constants and defaults of one servo model."""
    name: str
    model_number: int
    position_counts_per_rev: int = 4096       # 0.088 deg / count
    velocity_rpm_per_lsb: float = 0.229
    current_amp_per_lsb: float = 2.69e-3
    voltage_volt_per_lsb: float = 0.1
    temperature_c_per_lsb: float = 1.0
    current_limit_max_lsb: int = 1193         # factory Current Limit (38)
    velocity_limit_default_lsb: int = 200
    position_min_count: int = 0
    position_max_count: int = 4095
    torque_constant_nm_per_a: float = 1.6     # rough stall torque / stall current

    # conversions servo-side raw <-> SI (pure functions of the table)
    @property
    def rad_per_count(self) -> float:
        return 2.0 * math.pi / self.position_counts_per_rev

    @property
    def rad_s_per_lsb(self) -> float:
        return self.velocity_rpm_per_lsb * 2.0 * math.pi / 60.0

    @property
    def current_limit_max_a(self) -> float:
        return self.current_limit_max_lsb * self.current_amp_per_lsb


MODELS: Dict[str, ModelUnits] = {
    "XM430-W350": ModelUnits("XM430-W350", 1020, current_amp_per_lsb=2.69e-3,
                             current_limit_max_lsb=1193, velocity_limit_default_lsb=200,
                             torque_constant_nm_per_a=1.78),
    "XM430-W210": ModelUnits("XM430-W210", 1030, current_amp_per_lsb=2.69e-3,
                             current_limit_max_lsb=1193, velocity_limit_default_lsb=330,
                             torque_constant_nm_per_a=1.31),
    "XM540-W270": ModelUnits("XM540-W270", 1120, current_amp_per_lsb=2.69e-3,
                             current_limit_max_lsb=2047, velocity_limit_default_lsb=128,
                             torque_constant_nm_per_a=2.08),
    "XM540-W150": ModelUnits("XM540-W150", 1130, current_amp_per_lsb=2.69e-3,
                             current_limit_max_lsb=2047, velocity_limit_default_lsb=230,
                             torque_constant_nm_per_a=1.48),
    "XH430-W350": ModelUnits("XH430-W350", 1010, current_amp_per_lsb=1.34e-3,
                             current_limit_max_lsb=648, velocity_limit_default_lsb=210,
                             torque_constant_nm_per_a=3.0),
}
MODELS_BY_NUMBER: Dict[int, ModelUnits] = {m.model_number: m for m in MODELS.values()}
DEFAULT_MODEL = MODELS["XM430-W350"]


def get_model(model) -> ModelUnits:
    """Accept a :class:`ModelUnits`, a model name or a model number."""
    if isinstance(model, ModelUnits):
        return model
    if isinstance(model, int):
        return MODELS_BY_NUMBER[model]
    return MODELS[str(model)]


# Raw <-> SI (servo output shaft side) ---------------------------------------------
def to_signed(value: int, size: int) -> int:
    bits = 8 * size
    value &= (1 << bits) - 1
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


def decode(item: Item, data: bytes, offset: int = 0) -> int:
    raw = int.from_bytes(bytes(data[offset:offset + item.size]), "little")
    return to_signed(raw, item.size) if item.signed else raw


def encode(item: Item, value: int) -> bytes:
    return int(value & ((1 << (8 * item.size)) - 1)).to_bytes(item.size, "little")


def counts_to_rad(counts: int, m: ModelUnits = DEFAULT_MODEL) -> float:
    return counts * m.rad_per_count


def rad_to_counts(rad: float, m: ModelUnits = DEFAULT_MODEL) -> int:
    return int(round(rad / m.rad_per_count))


def velocity_raw_to_rad_s(raw: int, m: ModelUnits = DEFAULT_MODEL) -> float:
    return raw * m.rad_s_per_lsb


def rad_s_to_velocity_raw(rad_s: float, m: ModelUnits = DEFAULT_MODEL) -> int:
    return int(round(rad_s / m.rad_s_per_lsb))


def current_raw_to_amp(raw: int, m: ModelUnits = DEFAULT_MODEL) -> float:
    return raw * m.current_amp_per_lsb


def amp_to_current_raw(amp: float, m: ModelUnits = DEFAULT_MODEL) -> int:
    return int(round(amp / m.current_amp_per_lsb))


def voltage_raw_to_volt(raw: int, m: ModelUnits = DEFAULT_MODEL) -> float:
    return raw * m.voltage_volt_per_lsb


def temperature_raw_to_c(raw: int, m: ModelUnits = DEFAULT_MODEL) -> float:
    return raw * m.temperature_c_per_lsb


class StateBlock(NamedTuple):
    """Decoded raw values of the contiguous state block."""
    current: int
    velocity: int
    position: int
    voltage: int
    temperature: int


def decode_state_block(data: bytes) -> StateBlock:
    """Decode the STATE_BLOCK_LEN bytes starting at STATE_BLOCK_START."""
    if len(data) != STATE_BLOCK_LEN:
        raise ValueError("state block must be %d bytes, got %d" % (STATE_BLOCK_LEN, len(data)))
    o = STATE_BLOCK_START
    return StateBlock(
        decode(PRESENT_CURRENT, data, PRESENT_CURRENT.address - o),
        decode(PRESENT_VELOCITY, data, PRESENT_VELOCITY.address - o),
        decode(PRESENT_POSITION, data, PRESENT_POSITION.address - o),
        decode(PRESENT_INPUT_VOLTAGE, data, PRESENT_INPUT_VOLTAGE.address - o),
        decode(PRESENT_TEMPERATURE, data, PRESENT_TEMPERATURE.address - o),
    )
