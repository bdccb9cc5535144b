"""`gluondist launch`: options -> a pure plan -> a process group -> a monitor that reports the
first failure. Nothing the launcher imports loads MXNet or click; the programs under child/ run
as processes of their own (the servers' loads MXNet)."""
