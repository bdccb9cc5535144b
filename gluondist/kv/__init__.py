"""The parameter-server parts behind gluondist.kvstore."""
