"""Dynamixel Protocol 2.0 codec (pure Python, no ROS, no SDK dependency).

Frame layout (before stuffing)::

    FF FF FD 00 | ID | LEN_L LEN_H | INST | [ERR] PARAMS... | CRC_L CRC_H

``LEN`` counts everything after the length field: instruction, parameters
(for status packets: the error byte plus parameters) and the 2 CRC bytes.
Byte stuffing: inside INST..PARAMS every ``FF FF FD`` is followed by an extra
``FD``; ``LEN`` is the *stuffed* length and the CRC is computed over the
stuffed bytes (header through the last parameter).

The module provides:

* :func:`crc16` - CRC-16/BUYPASS variant used by ROBOTIS (poly 0x8005, init 0,
  no reflection), transmitted little-endian.
* :func:`stuff` / :func:`unstuff` - byte stuffing of the INST..PARAMS region.
* :func:`build_instruction` / :func:`build_status` - complete wire packets.
* :func:`parse_packet` - parse one complete wire packet.
* :class:`PacketParser` - incremental stream parser that resynchronises on
  garbage and reports CRC errors and truncated packets.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import List, Optional

HEADER = b"\xff\xff\xfd\x00"
BROADCAST_ID = 0xFE
MAX_ID = 0xFC
MAX_PACKET_LEN = 1024  # same bound as the ROBOTIS SDK RX/TX buffers

# Instructions -------------------------------------------------------------
INST_PING = 0x01
INST_READ = 0x02
INST_WRITE = 0x03
INST_REG_WRITE = 0x04
INST_ACTION = 0x05
INST_FACTORY_RESET = 0x06
INST_REBOOT = 0x08
INST_CLEAR = 0x10
INST_STATUS = 0x55
INST_SYNC_READ = 0x82
INST_SYNC_WRITE = 0x83
INST_FAST_SYNC_READ = 0x8A
INST_BULK_READ = 0x92
INST_BULK_WRITE = 0x93
INST_FAST_BULK_READ = 0x9A

INSTRUCTION_NAMES = {
    INST_PING: "PING", INST_READ: "READ", INST_WRITE: "WRITE",
    INST_REG_WRITE: "REG_WRITE", INST_ACTION: "ACTION",
    INST_FACTORY_RESET: "FACTORY_RESET", INST_REBOOT: "REBOOT",
    INST_CLEAR: "CLEAR", INST_STATUS: "STATUS", INST_SYNC_READ: "SYNC_READ",
    INST_SYNC_WRITE: "SYNC_WRITE", INST_FAST_SYNC_READ: "FAST_SYNC_READ",
    INST_BULK_READ: "BULK_READ", INST_BULK_WRITE: "BULK_WRITE",
    INST_FAST_BULK_READ: "FAST_BULK_READ",
}

# Status packet error byte ------------------------------------------------
ERR_NONE = 0x00
ERR_RESULT_FAIL = 0x01
ERR_INSTRUCTION = 0x02
ERR_CRC = 0x03
ERR_DATA_RANGE = 0x04
ERR_DATA_LENGTH = 0x05
ERR_DATA_LIMIT = 0x06
ERR_ACCESS = 0x07
ERR_ALERT = 0x80  # bit 7: device has a hardware error (see Hardware Error Status)

ERROR_NAMES = {
    ERR_NONE: "none", ERR_RESULT_FAIL: "result fail",
    ERR_INSTRUCTION: "instruction error", ERR_CRC: "CRC error",
    ERR_DATA_RANGE: "data range error", ERR_DATA_LENGTH: "data length error",
    ERR_DATA_LIMIT: "data limit error", ERR_ACCESS: "access error",
}


def describe_error(err: int) -> str:
    """Human readable text for a status packet error byte."""
    parts = []
    code = err & 0x7F
    if code:
        parts.append(ERROR_NAMES.get(code, "unknown error 0x%02X" % code))
    if err & ERR_ALERT:
        parts.append("hardware alert")
    return ", ".join(parts) if parts else "none"


# CRC ------------------------------------------------------------------------
def _make_crc_table() -> List[int]:
    table = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if (crc & 0x8000) else (crc << 1)
        table.append(crc & 0xFFFF)
    return table


_CRC_TABLE = _make_crc_table()


def crc16(data, crc: int = 0) -> int:
    """CRC-16 (poly 0x8005, init 0, MSB-first, no final xor) over *data*."""
    for b in data:
        crc = ((crc << 8) ^ _CRC_TABLE[((crc >> 8) ^ b) & 0xFF]) & 0xFFFF
    return crc


# Stuffing --------------------------------------------------------------------
def stuff(body: bytes) -> bytes:
    """Insert 0xFD after every FF FF FD in *body* (the INST..PARAMS region).

    Matching uses the *original* bytes, like the firmware and the SDK do: the
    header is not part of *body*, so a body starting with FD is never stuffed
    against the header's trailing 00.
    """
    out = bytearray()
    for i, b in enumerate(body):
        out.append(b)
        if b == 0xFD and i >= 2 and body[i - 1] == 0xFF and body[i - 2] == 0xFF:
            out.append(0xFD)
    return bytes(out)


def unstuff(body: bytes) -> bytes:
    """Inverse of :func:`stuff`: drop the FD that follows each FF FF FD."""
    out = bytearray()
    i = 0
    n = len(body)
    while i < n:
        b = body[i]
        out.append(b)
        if b == 0xFD and i >= 2 and body[i - 1] == 0xFF and body[i - 2] == 0xFF \
                and i + 1 < n and body[i + 1] == 0xFD:
            i += 2
            continue
        i += 1
    return bytes(out)


# Packet build ----------------------------------------------------------------
def _frame(servo_id: int, body: bytes) -> bytes:
    """Frame an unstuffed INST..PARAMS body into a wire packet."""
    if not 0 <= servo_id <= 0xFE:
        raise ValueError("servo id out of range: %r" % servo_id)
    stuffed = stuff(body)
    length = len(stuffed) + 2
    if length + 7 > MAX_PACKET_LEN:
        raise ValueError("packet too long (%d bytes)" % (length + 7))
    pkt = bytearray(HEADER)
    pkt.append(servo_id)
    pkt += bytes((length & 0xFF, length >> 8))
    pkt += stuffed
    crc = crc16(pkt)
    pkt += bytes((crc & 0xFF, crc >> 8))
    return bytes(pkt)


def build_instruction(servo_id: int, instruction: int, params: bytes = b"") -> bytes:
    """Complete instruction packet ``FF FF FD 00 ID LEN INST PARAMS CRC``."""
    return _frame(servo_id, bytes((instruction,)) + bytes(params))


def build_status(servo_id: int, error: int = 0, params: bytes = b"") -> bytes:
    """Complete status packet ``FF FF FD 00 ID LEN 55 ERR PARAMS CRC``."""
    return _frame(servo_id, bytes((INST_STATUS, error & 0xFF)) + bytes(params))


# Parameter helpers for common instructions -------------------------------------
def le(value: int, size: int) -> bytes:
    """Little-endian two's-complement encoding of *value* in *size* bytes."""
    return int(value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def from_le(data, signed: bool = False) -> int:
    return int.from_bytes(bytes(data), "little", signed=signed)


def read_params(address: int, length: int) -> bytes:
    return le(address, 2) + le(length, 2)


def write_params(address: int, data: bytes) -> bytes:
    return le(address, 2) + bytes(data)


def sync_write_params(address: int, length: int, data_by_id) -> bytes:
    out = bytearray(le(address, 2) + le(length, 2))
    for sid, data in data_by_id.items():
        if len(data) != length:
            raise ValueError("sync write data for id %d has %d bytes, expected %d"
                             % (sid, len(data), length))
        out.append(sid)
        out += bytes(data)
    return bytes(out)


# Parsing -----------------------------------------------------------------------
class ProtocolError(Exception):
    """A packet could not be decoded."""


class CRCError(ProtocolError):
    pass


class TruncatedPacket(ProtocolError):
    pass


@dataclass
class Packet:
    """A decoded (unstuffed) packet."""
    servo_id: int
    instruction: int
    params: bytes            # for status packets: parameters *after* the error byte
    error: Optional[int] = None  # status packets only
    raw: bytes = b""
    timestamp: float = 0.0   # time.monotonic() when the last byte was parsed

    @property
    def is_status(self) -> bool:
        return self.instruction == INST_STATUS


def parse_packet(data: bytes) -> Packet:
    """Parse exactly one complete wire packet (header must be at offset 0)."""
    data = bytes(data)
    if len(data) < 10 or data[:4] != HEADER:
        if data[:4] == HEADER[:len(data[:4])]:
            raise TruncatedPacket("packet shorter than the minimum frame")
        raise ProtocolError("missing header")
    length = data[5] | (data[6] << 8)
    total = 7 + length
    if length < 3:
        raise ProtocolError("length field too small: %d" % length)
    if len(data) < total:
        raise TruncatedPacket("need %d bytes, have %d" % (total, len(data)))
    if len(data) > total:
        raise ProtocolError("%d trailing bytes after packet" % (len(data) - total))
    crc_rx = data[total - 2] | (data[total - 1] << 8)
    crc_calc = crc16(data[:total - 2])
    if crc_rx != crc_calc:
        raise CRCError("CRC mismatch: got 0x%04X, computed 0x%04X" % (crc_rx, crc_calc))
    body = unstuff(data[7:total - 2])
    inst = body[0]
    if inst == INST_STATUS:
        if len(body) < 2:
            raise ProtocolError("status packet without error byte")
        return Packet(data[4], inst, body[2:], body[1], data)
    return Packet(data[4], inst, body[1:], None, data)


@dataclass
class ParserStats:
    packets: int = 0
    crc_errors: int = 0
    truncated: int = 0
    garbage_bytes: int = 0
    bad_length: int = 0


class PacketParser:
    """Incremental Protocol 2.0 stream parser.

    Feed arbitrary chunks with :meth:`feed`; it returns the complete packets
    found. Bytes that cannot start a packet are skipped (``stats.garbage_bytes``).
    A packet whose CRC fails is dropped (``stats.crc_errors``) and the parser
    resynchronises at the byte after that packet's header.  A packet that
    stays incomplete is reported as truncated when a new header shows up
    inside it (its CRC will then fail too - it is counted once, as truncated),
    or by :meth:`check_timeout` / :meth:`flush` once no more bytes arrive.
    """

    MAX_ERRORS_KEPT = 100

    def __init__(self, max_length: int = MAX_PACKET_LEN):
        self.buf = bytearray()
        self.max_length = max_length
        self.stats = ParserStats()
        self.errors: List[ProtocolError] = []     # the latest MAX_ERRORS_KEPT
        self._last_rx = 0.0
        self._inline = False

    def reset(self) -> None:
        self.buf.clear()

    @property
    def pending(self) -> int:
        return len(self.buf)

    def feed(self, data: bytes, now: Optional[float] = None) -> List[Packet]:
        if data:
            self.buf += data
            self._last_rx = time.monotonic() if now is None else now
        out: List[Packet] = []
        while True:
            pkt = self._next()
            if pkt is None:
                break
            pkt.timestamp = self._last_rx
            out.append(pkt)
        return out

    def feed_items(self, data: bytes, now: Optional[float] = None) -> list:
        """Like :meth:`feed`, but the CRC and truncation errors are returned too, in stream order
        (a :class:`ProtocolError` between the packets), so a reader knows which reply was bad."""
        self._inline = True
        try:
            return self.feed(data, now)
        finally:
            self._inline = False

    def _error(self, exc: ProtocolError):
        self.errors.append(exc)
        if len(self.errors) > self.MAX_ERRORS_KEPT:
            del self.errors[0]
        return exc if self._inline else None

    def _find_header(self, start: int = 0) -> int:
        buf = self.buf
        i = buf.find(b"\xff\xff\xfd", start)
        while i >= 0:
            # FF FF FD FD is a stuffed sequence, never a header
            if i + 3 < len(buf) and buf[i + 3] != 0x00:
                i = buf.find(b"\xff\xff\xfd", i + 1)
                continue
            return i
        return -1

    def _drop(self, n: int) -> None:
        del self.buf[:n]

    def _next(self) -> Optional[Packet]:
        buf = self.buf
        while True:
            i = self._find_header()
            if i < 0:
                # keep a possible partial header at the tail
                keep = 0
                for k in (3, 2, 1):
                    if len(buf) >= k and bytes(buf[-k:]) == HEADER[:k]:
                        keep = k
                        break
                self.stats.garbage_bytes += len(buf) - keep
                self._drop(len(buf) - keep)
                return None
            if i > 0:
                self.stats.garbage_bytes += i
                self._drop(i)
            if len(buf) < 7:
                return None
            length = buf[5] | (buf[6] << 8)
            if length < 3 or length + 7 > self.max_length or buf[4] == 0xFF:
                self.stats.bad_length += 1
                self.stats.garbage_bytes += 1
                self._drop(1)
                continue
            total = 7 + length
            # a new header inside the expected span => this packet was cut short
            nxt = self._find_header(4)
            if 0 <= nxt < total and len(buf) >= nxt + 7:
                if len(buf) < total or crc16(buf[:total - 2]) != (buf[total - 2] | (buf[total - 1] << 8)):
                    self.stats.truncated += 1
                    err = self._error(TruncatedPacket(
                        "packet from id %d cut after %d of %d bytes" % (buf[4], nxt, total)))
                    self._drop(nxt)
                    if err is not None:
                        return err
                    continue
            if len(buf) < total:
                return None
            raw = bytes(buf[:total])
            try:
                pkt = parse_packet(raw)
            except CRCError as exc:
                self.stats.crc_errors += 1
                self._drop(3)
                if self._error(exc) is not None:
                    return exc
                continue
            except ProtocolError as exc:
                self._drop(3)
                if self._error(exc) is not None:
                    return exc
                continue
            self._drop(total)
            self.stats.packets += 1
            return pkt

    def check_timeout(self, timeout: float, now: Optional[float] = None) -> bool:
        """Report (and drop) a partial packet if no byte came for *timeout* s."""
        now = time.monotonic() if now is None else now
        if self.buf and now - self._last_rx > timeout:
            self.flush()
            return True
        return False

    def flush(self) -> int:
        """Declare the stream finished; a partial packet counts as truncated."""
        n = len(self.buf)
        if n:
            if self._find_header() >= 0:
                self.stats.truncated += 1
                self._error(TruncatedPacket("stream ended inside a packet (%d bytes)" % n))
            else:
                self.stats.garbage_bytes += n
            self.buf.clear()
        return n
