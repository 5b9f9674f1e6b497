"""Emulated servos driving an arm model behind a faulty serial link, in a process of its own (the bridge's
fail-safe tests): ServoEmulator + ModelPlant (servo ids and joint conventions from the bridge's parameter file,
as ``dxl_emulator --arm --params``) + test/fault_proxy.FaultProxy, and a recorder of the arm's state at every
plant advance.

    python test/nodes/faulty_link.py ARM.yaml BRIDGE.yaml LINK [key=value ...]

prints LINK on stdout when serving, then takes one command a line on stdin, each answered ``ok <command> <t>``
(t: time.monotonic() when it took effect): cut, restore, unplug, replug, drop P [to_servos|to_bridge], delay S,
mark NAME, dump PATH (npz: t, z, zd, current, and json of the Bus Watchdog expiries, proxy events, marks), quit.
key=value: emulator joint overrides, e.g. mode=current_position (every joint)."""
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fault_proxy import FaultProxy  # noqa: E402

from flexarm_control.bridge.config import load_yaml  # noqa: E402
from flexarm_control.emulation.servo_emulator import ServoEmulator  # noqa: E402
from flexarm_control.emulation.plants import ModelPlant  # noqa: E402
from flexarm_sim.model import load_model  # noqa: E402


def main():
    arm, params, link = sys.argv[1:4]
    over = dict(a.split('=', 1) for a in sys.argv[4:])
    cfg = load_yaml(params, overrides={f'joints.{j}.{k}': v for j in load_yaml(params).names for k, v in over.items()})
    joints = list(cfg.joints)
    plant = ModelPlant(load_model(arm), joints)
    emu = ServoEmulator([j.servo_id for j in joints], model=cfg['model'], plant=plant,
                        link_path=link + '.servos')
    rec = []
    emu.on_plant_step = lambda t: rec.append((t, plant.state.z.copy(), plant.state.zd.copy(), plant.i.copy()))
    proxy = FaultProxy(emu.port_name, link)
    marks = []
    print(link, flush=True)
    try:
        for line in sys.stdin:
            words = line.split()
            if not words:
                continue
            cmd, args = words[0], words[1:]
            t = None
            if cmd in ('cut', 'restore', 'unplug', 'replug'):
                t = getattr(proxy, cmd)()
            elif cmd == 'drop':
                t = proxy.drop(float(args[0]), *(args[1:2]))
            elif cmd == 'delay':
                t = proxy.delay(float(args[0]))
            elif cmd == 'mark':
                t = time.monotonic()
                marks.append((t, ' '.join(args)))
            elif cmd == 'dump':
                with emu._lock:
                    data = list(rec)
                    events = [dict(e) for e in emu.watchdog_events]
                np.savez(args[0], t=np.array([r[0] for r in data]), z=np.array([r[1] for r in data]),
                         zd=np.array([r[2] for r in data]), current=np.array([r[3] for r in data]),
                         info=json.dumps({'watchdog': events, 'proxy': proxy.events, 'marks': marks,
                                          'deliveries': proxy.deliveries, 'counts': proxy.counts}))
            elif cmd == 'quit':
                print('ok quit', flush=True)
                break
            else:
                print(f'error {line.strip()}', flush=True)
                continue
            print(f'ok {" ".join(words)} {t if t is not None else ""}'.rstrip(), flush=True)
    finally:
        proxy.close()
        emu.close()


if __name__ == '__main__':
    main()
