# Source me (". ./env.sh") after `make setup`: activates .venv and the colcon workspace.
# Works from bash and from `sh`-style sourcing in Makefiles. Do not `set -u` before sourcing
# (colcon's setup scripts read unset variables).
if [ -n "${BASH_SOURCE:-}" ]; then
    _flexarm_root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
else
    _flexarm_root="$(pwd)"
fi
if [ ! -f "$_flexarm_root/install/.flexarm_build_ok" ]; then
    echo "flexarm: workspace not built (or last build failed): run 'make setup' in $_flexarm_root" >&2
    return 1 2>/dev/null || exit 1
fi
export VIRTUAL_ENV="$_flexarm_root/.venv"
case ":$PATH:" in *":$VIRTUAL_ENV/bin:"*) ;; *) export PATH="$VIRTUAL_ENV/bin:$PATH" ;; esac
export ROS_VERSION=2 ROS_PYTHON_VERSION=3 ROS_DISTRO=kilted
# DDS on loopback unless the user chose otherwise.
export ROS_AUTOMATIC_DISCOVERY_RANGE="${ROS_AUTOMATIC_DISCOVERY_RANGE:-LOCALHOST}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
# numba's on-disk cache of compiled kernels (start-up time).
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$_flexarm_root/.cache/numba}"
# the controllers' gain-schedule cells, designed once (flexarm_control/controller/design_cache.py; "off" disables).
export FLEXARM_CACHE_DIR="${FLEXARM_CACHE_DIR:-$_flexarm_root/.cache/flexarm}"
if [ -n "${BASH_VERSION:-}" ]; then
    . "$_flexarm_root/install/setup.bash"
elif [ -n "${ZSH_VERSION:-}" ]; then
    . "$_flexarm_root/install/setup.zsh"
else
    COLCON_CURRENT_PREFIX="$_flexarm_root/install" . "$_flexarm_root/install/setup.sh"
fi
# The wheels install into the venv prefix, which has no colcon local_setup: make it visible to ament
# (added after the workspace setup so colcon does not warn about it).
case ":${AMENT_PREFIX_PATH:-}:" in *":$VIRTUAL_ENV:"*) ;; *) export AMENT_PREFIX_PATH="${AMENT_PREFIX_PATH:+$AMENT_PREFIX_PATH:}$VIRTUAL_ENV" ;; esac
# The user-facing `flexarm` command is on PATH from the workspace's setup script (install/flexarm_bringup/bin), as
# for a ROS user who sources install/setup.bash.
unset _flexarm_root
