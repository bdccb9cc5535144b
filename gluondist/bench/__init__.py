"""`gluondist bench kvstore` (kvstore.py), its worker, the TCP probe and the cost model."""
