import os
import runpy

from setuptools import find_packages, setup

package_name = 'flexarm_control'
KINDS = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), package_name, 'controller',
                                    'kinds.py'))['KINDS']

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test']),
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
    ],
    install_requires=['setuptools'],
    zip_safe=False,
    maintainer='flexarm maintainers',
    maintainer_email='maintainers@example.com',
    description='Controllers for flexible-link arms and the Dynamixel hardware bridge.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            # one executable per controller kind (controller/kinds.py), all the same entry point
            *(f'{kind} = flexarm_control.entry:controller' for kind in KINDS),
            'hardware_bridge = flexarm_control.entry:hardware_bridge',
            'state_estimator = flexarm_control.entry:state_estimator',
            'dxl_emulator = flexarm_control.emulation.servo_emulator:main',
        ],
    },
)
