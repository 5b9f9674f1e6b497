"""ROS 2 nodes of flexarm_control."""
