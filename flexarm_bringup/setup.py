import os
from glob import glob

from setuptools import find_packages, setup

package_name = 'flexarm_bringup'


def share(subdir, pattern):
    """Install files matching pattern under share/<package>/<subdir>."""
    return (os.path.join('share', package_name, subdir), glob(os.path.join(subdir, pattern)))


setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        share('config', '*.yaml'),
        share('launch', '*.launch.py'),
        ('bin', ['bin/flexarm']),                 # `flexarm` on PATH after sourcing the workspace (colcon)
    ],
    install_requires=['setuptools'],
    zip_safe=False,
    maintainer='flexarm maintainers',
    maintainer_email='maintainers@example.com',
    description='Launch files, configs and the flexarm command.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'flexarm = flexarm_bringup.cli:main',
            'flex_joint_states = flexarm_bringup.entry:flex_joint_states',
        ],
    },
)
