"""Documentation generated from the code that owns it: the shipped parameter files and the README's tables.

    python -m flexarm_bringup.docs           # check (exit 1 naming what is stale)
    python -m flexarm_bringup.docs --write   # regenerate

Generated: config/plant.yaml, config/controllers.yaml and config/estimator.yaml (from the nodes' parameter tables)
and the README blocks between `<!-- BEGIN <name>` and `<!-- END <name> -->`: arm-ranges (the arm schema's
plausibility ranges), params-plant, params-controllers, params-estimator, params-bridge (the parameter tables).
config/hardware_bridge.yaml is a hand-written example (wiring advice between the parameters); test_docs_generated
checks it lists every parameter of the tables.
"""
from __future__ import annotations

import os
import re
import sys

from flexarm_control.bridge import config as bridge_config
from flexarm_control.controller import config as controller_config
from flexarm_control.estimation import config as estimator_config
from flexarm_sim.model import spec
from flexarm_sim.plant import config as plant_config

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.realpath(__file__)), '..', '..'))   # the source tree
CONFIG = os.path.join(ROOT, 'flexarm_bringup', 'config')


def controllers_markdown() -> str:
    t = controller_config
    common = t.TABLES['pd_servo'].__class__('controllers', t.COMMON)
    out = ['Every controller node (' + ', '.join(f'`{k}`' for k in t.KINDS) + '):', '', common.render_markdown()]
    for kind in t.KINDS:
        out += ['', f'`{kind}` only:', '', t.TABLES[kind].__class__(kind, t.GAINS[kind]).render_markdown()]
    return '\n'.join(out)


def bridge_markdown() -> str:
    return '\n'.join(['The bridge:', '', bridge_config.TABLE.render_markdown(), '',
                      'Each joint `joints.<joint>.` (every name in `joint_names`):', '',
                      bridge_config.JOINT_TABLE.render_markdown()])


FILES = {os.path.join(CONFIG, 'plant.yaml'): plant_config.render,
         os.path.join(CONFIG, 'controllers.yaml'): controller_config.render,
         os.path.join(CONFIG, 'estimator.yaml'): estimator_config.render}
README_BLOCKS = {'arm-ranges': spec.ranges_markdown, 'params-plant': plant_config.TABLE.render_markdown,
                 'params-controllers': controllers_markdown, 'params-bridge': bridge_markdown,
                 'params-estimator': estimator_config.TABLE.render_markdown}


def _block_re(name):
    return re.compile(r'(<!-- BEGIN ' + re.escape(name) + r'[^>]*-->\n)(.*?)(<!-- END ' + re.escape(name) + r' -->)',
                      re.S)


def stale() -> list:
    """What differs from its generator (file paths and README block names)."""
    out = [p for p, gen in FILES.items() if open(p, encoding='utf-8').read() != gen()]
    text = open(os.path.join(ROOT, 'README.md'), encoding='utf-8').read()
    for name, gen in README_BLOCKS.items():
        m = _block_re(name).search(text)
        if m is None or m.group(2) != gen():
            out.append(f'README.md block {name}')
    return out


def write():
    for p, gen in FILES.items():
        with open(p, 'w', encoding='utf-8') as f:
            f.write(gen())
    path = os.path.join(ROOT, 'README.md')
    text = open(path, encoding='utf-8').read()
    for name, gen in README_BLOCKS.items():
        if _block_re(name).search(text) is None:
            raise SystemExit(f'README.md has no block {name} (add <!-- BEGIN {name} --> / <!-- END {name} -->)')
        text = _block_re(name).sub(lambda m: m.group(1) + gen() + m.group(3), text)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if '--write' in argv:
        write()
        return 0
    bad = stale()
    if bad:
        print('stale (python -m flexarm_bringup.docs --write): ' + ', '.join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
