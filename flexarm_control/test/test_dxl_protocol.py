"""Protocol 2.0 codec, control table and pure unit conversions (no I/O)."""
import math
import random

import pytest

from flexarm_control.bridge import control_table as ct
from flexarm_control.bridge import protocol as p
from flexarm_control.bridge.servo_bus import (
    JointServoConfig, clamp_current_raw, current_limit_raw, current_to_effort,
    effort_to_current, joint_position_to_servo_counts, joint_velocity_to_servo_raw,
    servo_counts_to_joint_position, servo_velocity_to_joint)
from flexarm_sim.common.params import ConfigError

pytestmark = pytest.mark.timeout(30)


# --- CRC -------------------------------------------------------------------------------
def test_crc_emanual_vector():
    # ROBOTIS e-manual: READ id 1, address 132, length 4 -> CRC bytes 1D 15
    pkt = bytes([0xFF, 0xFF, 0xFD, 0x00, 0x01, 0x07, 0x00, 0x02, 0x84, 0x00, 0x04, 0x00])
    crc = p.crc16(pkt)
    assert crc == 0x151D
    assert bytes((crc & 0xFF, crc >> 8)) == b"\x1d\x15"  # transmitted low byte first
    assert p.build_instruction(1, p.INST_READ, p.read_params(132, 4)) == pkt + b"\x1d\x15"


def test_crc_matches_sdk_table():
    from dynamixel_sdk import PacketHandler
    ph = PacketHandler(2.0)
    rng = random.Random(1)
    for _ in range(50):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 60)))
        assert p.crc16(data) == ph.updateCRC(0, list(data), len(data))


# --- stuffing --------------------------------------------------------------------------
def test_stuffing_basic():
    assert p.stuff(b"\x03\xff\xff\xfd\x01") == b"\x03\xff\xff\xfd\xfd\x01"
    assert p.unstuff(b"\x03\xff\xff\xfd\xfd\x01") == b"\x03\xff\xff\xfd\x01"
    # FF FF FD FD in the raw data is stuffed once (after the first FD only)
    raw = b"\x03\xff\xff\xfd\xfd"
    assert p.stuff(raw) == b"\x03\xff\xff\xfd\xfd\xfd"
    assert p.unstuff(p.stuff(raw)) == raw


def test_stuffing_round_trip_random_and_sdk_agreement():
    from dynamixel_sdk import PacketHandler
    ph = PacketHandler(2.0)
    rng = random.Random(7)
    for _ in range(300):
        body = bytes(rng.choice([0xFF, 0xFD, 0x00, rng.randrange(256)]) for _ in range(rng.randrange(1, 40)))
        assert p.unstuff(p.stuff(body)) == body
        # build with the SDK's stuffing and compare with ours (write packet)
        params = body
        ours = p.build_instruction(3, p.INST_WRITE, params)
        txp = [0xFF, 0xFF, 0xFD, 0x00, 3, 0, 0, p.INST_WRITE] + list(params) + [0, 0]
        n = len(params) + 3
        txp[5], txp[6] = n & 0xFF, n >> 8
        txp = ph.addStuffing(txp)
        total = txp[5] + (txp[6] << 8) + 7
        crc = ph.updateCRC(0, txp, total - 2)
        sdk = bytes(txp[:total - 2]) + bytes((crc & 0xFF, crc >> 8))
        assert ours == sdk
        assert p.parse_packet(ours).params == params


def test_status_packet_build_parse():
    pkt = p.build_status(5, p.ERR_ALERT | p.ERR_ACCESS, b"\xff\xff\xfd\x10")
    d = p.parse_packet(pkt)
    assert d.is_status and d.servo_id == 5
    assert d.error == 0x87 and d.params == b"\xff\xff\xfd\x10"
    assert "access" in p.describe_error(d.error) and "alert" in p.describe_error(d.error)


# --- incremental parser ----------------------------------------------------------------------
def test_parser_resync_after_garbage_and_split_feed():
    a = p.build_status(1, 0, bytes(range(21)))
    b = p.build_status(2, 0, b"\xff\xff\xfd\x01\x02")
    stream = b"\x00\x13\xff\xff\xfd" + a + b"\xff\xfe\x42" + b
    parser = p.PacketParser()
    got = []
    for i in range(0, len(stream), 3):  # dribble in 3-byte chunks
        got += parser.feed(stream[i:i + 3])
    assert [g.servo_id for g in got] == [1, 2]
    assert got[1].params == b"\xff\xff\xfd\x01\x02"
    assert parser.stats.garbage_bytes > 0
    assert parser.stats.crc_errors + parser.stats.truncated <= 1  # the fake "FF FF FD" header at most
    assert parser.pending == 0


def test_parser_reports_crc_error_and_continues():
    good = p.build_status(1, 0, b"\x01\x02")
    bad = bytearray(p.build_status(2, 0, b"\x03\x04"))
    bad[-1] ^= 0xFF
    parser = p.PacketParser()
    got = parser.feed(bytes(bad) + good)
    assert [g.servo_id for g in got] == [1]
    assert parser.stats.crc_errors == 1
    with pytest.raises(p.CRCError):
        p.parse_packet(bytes(bad))


def test_parser_detects_truncation():
    full = p.build_status(1, 0, bytes(21))
    nxt = p.build_status(2, 0, bytes(21))
    parser = p.PacketParser()
    # truncated packet followed by a complete one: cut detected when the next header appears
    got = parser.feed(full[:12] + nxt)
    assert [g.servo_id for g in got] == [2]
    assert parser.stats.truncated == 1
    # truncated packet at the end of the stream: detected by timeout / flush
    assert parser.feed(full[:15]) == []
    assert parser.check_timeout(0.0, now=parser._last_rx + 1.0)
    assert parser.stats.truncated == 2
    with pytest.raises(p.TruncatedPacket):
        p.parse_packet(full[:15])


def test_instruction_param_helpers():
    prm = p.sync_write_params(102, 2, {1: p.le(-5, 2), 2: p.le(300, 2)})
    pkt = p.parse_packet(p.build_instruction(p.BROADCAST_ID, p.INST_SYNC_WRITE, prm))
    assert pkt.params == bytes([102, 0, 2, 0, 1, 0xFB, 0xFF, 2, 0x2C, 0x01])
    assert p.from_le(pkt.params[5:7], signed=True) == -5
    with pytest.raises(ValueError):
        p.sync_write_params(102, 2, {1: b"\x00"})


# --- control table ----------------------------------------------------------------------------
def test_state_block_layout():
    assert ct.STATE_BLOCK_START == 126 and ct.STATE_BLOCK_LEN == 21
    blk = bytearray(21)
    blk[0:2] = ct.encode(ct.PRESENT_CURRENT, -100)
    blk[2:6] = ct.encode(ct.PRESENT_VELOCITY, -7)
    blk[6:10] = ct.encode(ct.PRESENT_POSITION, -4096)
    blk[18:20] = ct.encode(ct.PRESENT_INPUT_VOLTAGE, 121)
    blk[20] = 41
    s = ct.decode_state_block(bytes(blk))
    assert s == ct.StateBlock(-100, -7, -4096, 121, 41)
    m = ct.MODELS["XM430-W350"]
    assert ct.counts_to_rad(4096, m) == pytest.approx(2 * math.pi)
    assert math.degrees(ct.counts_to_rad(1, m)) == pytest.approx(0.088, abs=1e-3)
    assert ct.velocity_raw_to_rad_s(1, m) == pytest.approx(0.229 * 2 * math.pi / 60)
    assert ct.current_raw_to_amp(1000, m) == pytest.approx(2.69)
    assert ct.voltage_raw_to_volt(121, m) == pytest.approx(12.1)
    assert ct.get_model(1020) is m


# --- pure joint-side conversions --------------------------------------------------------------------
def _joint(**kw):
    base = dict(name="j", servo_id=1, torque_constant=1.5, gear_ratio=3.0, direction=-1,
                zero_offset=0.25, current_limit=1.2, position_limits=(-2.0, 2.0))
    base.update(kw)
    return JointServoConfig(**base)


def test_position_velocity_round_trip():
    j = _joint()
    m = ct.DEFAULT_MODEL
    for q in (-1.9, -0.3, 0.0, 0.25, 1.7):
        counts = joint_position_to_servo_counts(q, j, m)
        assert float(servo_counts_to_joint_position(counts, j, m)) == pytest.approx(q, abs=m.rad_per_count / j.gear_ratio)
    # direction -1: positive servo counts -> joint below zero_offset
    assert float(servo_counts_to_joint_position(4096, j, m)) == pytest.approx(0.25 - 2 * math.pi / 3)
    raw = joint_velocity_to_servo_raw(1.0, j, m)
    assert raw < 0
    assert float(servo_velocity_to_joint(raw, j, m)) == pytest.approx(1.0, abs=m.rad_s_per_lsb / 3)


def test_effort_current_conversions_and_clamp():
    j = _joint()
    m = ct.DEFAULT_MODEL
    assert float(effort_to_current(4.5, j)) == pytest.approx(-1.0)  # 4.5 / (1.5*3) * -1
    assert float(current_to_effort(-1.0, j)) == pytest.approx(4.5)
    raw, clamped = clamp_current_raw(4.5, j, m)
    assert not clamped and raw == round(-1.0 / m.current_amp_per_lsb)
    raw, clamped = clamp_current_raw(100.0, j, m)
    assert clamped and raw == -current_limit_raw(j, m)
    assert abs(raw) * m.current_amp_per_lsb <= j.current_limit
    # the model maximum caps a generous configured limit
    assert current_limit_raw(_joint(current_limit=15.0), m) == m.current_limit_max_lsb     # (the table allows <= 20 A)


def test_joint_config_validation():
    with pytest.raises(ValueError):
        _joint(mode="velocity")
    with pytest.raises(ValueError):
        _joint(direction=2)
    with pytest.raises(ValueError):
        _joint(position_limits=(1.0, -1.0))


def test_joint_config_is_checked_by_the_bridge_table():
    """One shape, one validation: JointServoConfig's defaults and checks are JOINT_TABLE's (the bridge node's
    joints.<joint>.<key>), its errors name the parameter."""
    from flexarm_control.bridge.joint import JOINT_TABLE
    j = JointServoConfig('elbow', 2)
    for key, param in JOINT_TABLE.params.items():
        if param.default is not None:
            assert getattr(j, key) == param.default, key
    with pytest.raises(ConfigError, match=r"joints\.elbow\.current_limit"):
        JointServoConfig('elbow', 2, current_limit=50.0)
    with pytest.raises(ConfigError, match=r"joints\.elbow\.servo_id"):
        JointServoConfig('elbow', 253)
