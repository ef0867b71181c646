"""Stand-in for the torchtitan package: its train module is run with -m torchtitan.train."""
