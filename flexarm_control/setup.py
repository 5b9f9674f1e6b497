from setuptools import find_packages, setup

package_name = 'flexarm_control'

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
            'pd_servo = flexarm_control.entry:pd_servo',
            'modal = flexarm_control.entry:modal',
            'computed_torque = flexarm_control.entry:computed_torque',
            'hardware_bridge = flexarm_control.entry:hardware_bridge',
            'dxl_emulator = flexarm_control.bridge.emulator:main',
        ],
    },
)
