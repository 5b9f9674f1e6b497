"""Dynamixel SDK internals of its ``PortHandler`` that the bridge uses.

The bridge sends each request through the SDK (``PacketHandler.txPacket``) and reads the replies itself
(bridge/protocol.py frames and checks them, with a deadline of its own), so it needs of the port:

* ``is_using``: the SDK's "a transaction is in progress" flag, set by txPacket and cleared by the SDK's own reply
  read, which the bridge does not call: it clears the flag, else the next txPacket refuses (COMM_PORT_BUSY);
* ``ser``: the pyserial object, for the file descriptor the replies are read from (select + os.read);
* ``tx_time_per_byte``: the wire time of a byte (ms) at the port's baud rate, for the SDK's reply timeout rule.
"""
from __future__ import annotations

from . import CompatError


def release(port) -> None:
    """Clear the port's in-transaction flag (the bridge has read the replies itself)."""
    if not hasattr(port, 'is_using'):
        raise CompatError('dynamixel_sdk', 'PortHandler.is_using', 'the port has no such attribute')
    port.is_using = False


def file_descriptor(port) -> int:
    """The open port's file descriptor (its pyserial object's)."""
    try:
        return port.ser.fileno()
    except AttributeError as exc:
        raise CompatError('dynamixel_sdk', 'PortHandler.ser (the pyserial object)', str(exc)) from exc


def tx_time_per_byte(port) -> float:
    """Wire time of one byte at the port's baud rate, ms (the SDK's own figure)."""
    try:
        return float(port.tx_time_per_byte)
    except AttributeError as exc:
        raise CompatError('dynamixel_sdk', 'PortHandler.tx_time_per_byte', str(exc)) from exc


def check(port_name: str) -> None:
    """Open a PortHandler on `port_name` (a pty serves) and check what the bridge uses of it; CompatError naming
    the first that fails."""
    import os

    import dynamixel_sdk as dxl
    port = dxl.PortHandler(port_name)
    if not port.openPort():
        raise RuntimeError(f'could not open {port_name}')
    try:
        port.setBaudRate(1000000)
        fd = file_descriptor(port)
        if not (isinstance(fd, int) and fd >= 0 and os.fstat(fd)):
            raise CompatError('dynamixel_sdk', 'PortHandler.ser.fileno()', f'gave {fd!r}')
        t = tx_time_per_byte(port)
        if not abs(t - 1000.0 / 1000000 * 10.0) < 1e-9:
            raise CompatError('dynamixel_sdk', 'PortHandler.tx_time_per_byte', f'{t} ms at 1 Mbaud (10 bits a byte: '
                                                                               f'0.01 ms)')
        packets = dxl.PacketHandler(2.0)
        packets.txPacket(port, [0xFF, 0xFF, 0xFD, 0x00, 1, 3, 0, 1, 0, 0])
        if port.is_using is not True:
            raise CompatError('dynamixel_sdk', 'PortHandler.is_using', 'txPacket did not set it')
        release(port)
        if packets.txPacket(port, [0xFF, 0xFF, 0xFD, 0x00, 1, 3, 0, 1, 0, 0]) == dxl.COMM_PORT_BUSY:
            raise CompatError('dynamixel_sdk', 'PortHandler.is_using', 'clearing it does not free the port')
        release(port)
    finally:
        port.closePort()
