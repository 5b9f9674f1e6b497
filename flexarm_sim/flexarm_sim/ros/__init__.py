"""Thin ROS 2 adapters shared by every flexarm node: node start/stop (node_main.py), parameters (parameters.py)."""
