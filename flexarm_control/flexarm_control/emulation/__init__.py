"""Simulated hardware for tests, benchmarks and runs without servos: the Dynamixel servo emulator on a
pseudo-terminal (:mod:`.servo_emulator`, the ``dxl_emulator`` command), the plants that move its servos
(:mod:`.plants`) and the bus-rate benchmark (:mod:`.bus_rate`). The production bridge (:mod:`flexarm_control.bridge`)
never imports this package.
"""
