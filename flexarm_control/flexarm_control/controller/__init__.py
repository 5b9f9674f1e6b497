"""The controller without ROS: parameter tables (config.py), the runtime around a law (runtime.py), the gain
designer thread (designer.py)."""
