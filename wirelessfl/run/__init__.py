"""Running: configs, the run kinds, the run shell with its loop, and run records."""
