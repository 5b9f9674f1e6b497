"""`make bench`: run every benchmark script in bench/ (bench_*.py) and print their tables."""
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    scripts = sorted(glob.glob(os.path.join(HERE, 'bench_*.py')))
    if not scripts:
        print('no benchmarks yet')
        return 0
    status = 0
    for script in scripts:
        print(f'\n=== {os.path.basename(script)} ===', flush=True)
        status |= subprocess.call([sys.executable, script] + sys.argv[1:])
    return status


if __name__ == '__main__':
    sys.exit(main())
