from setuptools import find_packages, setup

package_name = 'flexarm_sim'

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
    description='Flexible-link arm dynamics (assumed modes, numba) and the real-time plant node.',
    license='Apache-2.0',
    entry_points={
        'console_scripts': [
            'plant = flexarm_sim.entry:plant',
            'precompile = flexarm_sim.entry:precompile',
        ],
    },
)
