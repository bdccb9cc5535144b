"""A wire format added in one module, as a user would: ``"exact"``, float32 gradients on
kvstore keys of their own, every gradient staged (summed over the devices, copied into a
staging array) and landed back by this class, so a job trained with it must end bit-equal to
one without compression. ``Exact.staged`` counts the arrays it pushed."""
import mxnet as mx

from gluondist.kv import compression


@compression.register
class Exact(compression.Compression):
    name = "exact"
    description = "float32 through a wire of its own (a test)"
    key_factor = 2  # its own float32 keys, after the trainer's
    whole_as_is = False  # every gradient through stage() and land()
    staged = 0

    def start(self, kv, keys, sizes):
        kv.init(list(keys), [mx.nd.zeros((n,), dtype="float32") for n in sizes])

    def stage(self, key, parts, staging, chunk):
        total = parts[0] if len(parts) == 1 else \
            mx.nd.add_n(*[p.as_in_context(parts[0].context) for p in parts])
        flat = total.reshape((-1,))
        buf = staging.take(self.key(key), [flat], "float32", chunk)[0]
        flat.copyto(buf)
        type(self).staged += 1
        return [buf]

    def land(self, bufs, out):
        for target in out if isinstance(out, (list, tuple)) else [out]:
            bufs[0].as_in_context(target.context).reshape(target.shape).copyto(target)
