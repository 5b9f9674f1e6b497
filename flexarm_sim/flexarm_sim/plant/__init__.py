"""The real-time plant: pure parts (config, commands, scheduler, engine, outputs) and the ROS node."""
