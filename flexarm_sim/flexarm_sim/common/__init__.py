"""Shared pieces without ROS: the parameter-table mechanism (params.py)."""
