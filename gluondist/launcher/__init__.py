"""`gluondist launch`: options -> a pure plan -> a process group -> a monitor that reports the
first failure. Nothing here imports MXNet or click."""
