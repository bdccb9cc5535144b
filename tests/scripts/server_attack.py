"""A worker for the server security tests: `server_attack.py ACTION DIR`.

`pickle`: worker 0 sends the servers command 0 (what kv.set_optimizer sends) holding a pickle
whose __reduce__ would create DIR/pwned, then both workers train on. `raises`: worker 0 sends
a built-in optimizer whose lr_scheduler lost an attribute, which the servers load (every class
in it is allowed) but whose update raises on the servers at the first push. Workers that get
through write DIR/<rank>.done.
"""
import os
import sys

import mxnet as mx

action, out = sys.argv[1], sys.argv[2]


class Pwn:
    def __reduce__(self):
        return os.system, (f"touch {os.path.join(out, 'pwned')}",)


kv = mx.kv.create("dist_sync")
kv.init(0, mx.nd.zeros((4,)))
if kv.rank == 0:
    if action == "pickle":
        import pickle
        kv._send_command_to_servers(0, pickle.dumps(Pwn(), 0).decode())
    elif action == "raises":
        optimizer = mx.optimizer.SGD(lr_scheduler=mx.lr_scheduler.FactorScheduler(step=10))
        del optimizer.lr_scheduler.step  # FactorScheduler.__call__ reads it on the server
        kv.set_optimizer(optimizer)
kv._barrier()
result = mx.nd.zeros((4,))
for _ in range(3):
    kv.push(0, mx.nd.ones((4,)))
    kv.pull(0, out=result)
result.wait_to_read()
open(os.path.join(out, f"{kv.rank}.done"), "w").close()
