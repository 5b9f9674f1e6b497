"""The servo bus's serial port: pyserial, opened raw at the bus's baud rate, 8N1, non-blocking.

The bridge frames every request itself (protocol.build_instruction: header, stuffing, CRC) and reads the replies
itself (protocol.PacketParser on the bytes ``os.read`` gets from :meth:`SerialLink.fileno`, waiting in ``select``),
so the link only writes whole requests, each after flushing what is left of earlier replies (as the vendor SDK's
txPacket does) - one transport, no SDK.
"""
from __future__ import annotations

COMM_SUCCESS = 0
COMM_TX_FAIL = -1001         # the codes of the vendor SDK (a reading's comm_result keeps its meaning)
COMM_RX_TIMEOUT = -3001
COMM_RX_CORRUPT = -3002
RESULT_TEXT = {
    COMM_SUCCESS: 'communication success',
    COMM_TX_FAIL: 'failed to transmit the instruction packet',
    COMM_RX_TIMEOUT: 'no status packet',
    COMM_RX_CORRUPT: 'incorrect status packet',
}
BITS_PER_BYTE = 10           # start + 8 data + stop
BAUD_RATES = (9600, 57600, 115200, 1000000, 2000000, 3000000, 4000000)   # the vendor SDK's list; not 4.5 Mbps


def result_text(res: int) -> str:
    return RESULT_TEXT.get(res, f'communication result {res}')


class SerialLink:
    def __init__(self, path: str, baudrate: int):
        import serial
        if int(baudrate) not in BAUD_RATES:
            raise ValueError(f'unsupported baud rate {baudrate} (one of {", ".join(map(str, BAUD_RATES))})')
        self.path, self.baudrate = path, int(baudrate)
        self.byte_ms = 1000.0 * BITS_PER_BYTE / self.baudrate     # wire time of one byte
        self._ser = serial.Serial(port=path, baudrate=self.baudrate, bytesize=serial.EIGHTBITS,
                                  parity=serial.PARITY_NONE, stopbits=serial.STOPBITS_ONE, timeout=0)
        self._ser.reset_input_buffer()

    @property
    def is_open(self) -> bool:
        return self._ser.is_open

    def fileno(self) -> int:
        return self._ser.fileno()

    def send(self, packet: bytes) -> int:
        """Flush the receive buffer, write the whole request: COMM_SUCCESS, or COMM_TX_FAIL if it went out short.
        A dead port raises OSError (serial.SerialException is one) or termios.error (the flush)."""
        self._ser.reset_input_buffer()
        written = self._ser.write(packet)
        return COMM_SUCCESS if written == len(packet) else COMM_TX_FAIL

    def close(self) -> None:
        self._ser.close()
