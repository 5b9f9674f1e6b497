"""The controller without ROS: parameter tables (config.py), the runtime around a law (runtime.py), the gain
designer (designer.py) and the planner (planner.py), which compute in processes of their own (worker.py)."""
