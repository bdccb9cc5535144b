"""Code that runs inside the processes the launcher starts."""
