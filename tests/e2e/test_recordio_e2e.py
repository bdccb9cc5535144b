"""The RecordIO page's job (docs/recordio.md), a real 2-worker `gluondist launch`: the page's
first block packs the images, its second is train_rec.py, run by the page's command; every
read of a record is logged, and each worker read only its slices of each global batch. The
in-process tests are tests/training/test_recordio.py."""
import collections
import re

import docpages
from gluondist import kvstore

# Put before the page's script: every record read (in a worker or its DataLoader's processes,
# forked after this) appends "launcher-rank file index" to reads.log.
COUNT = '''import os
from mxnet import gluon
_read = gluon.data.vision.ImageRecordDataset.__getitem__
def _logged(self, idx):
    with open("reads.log", "a") as f:
        f.write(f"{os.environ['GLUONDIST_RANK']} {os.path.basename(self.filename)} {idx}\\n")
    return _read(self, idx)
gluon.data.vision.ImageRecordDataset.__getitem__ = _logged
'''


def slices(length, rank, epochs, shuffle):
    """What worker ``rank`` of 2 reads of ``length`` samples in ``epochs`` epochs (fit's
    sampler, batch 64 each, seed 0 as the page's fit)."""
    sampler = kvstore.ShardedBatchSampler(length, 64, 2, rank, shuffle=shuffle, seed=0)
    out = collections.Counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        out.update(int(i) for idx, _ in sampler.batches() for i in idx)
    return out


def test_the_recordio_page_trains_as_a_job(tmp_path):
    pack, train = [b.code for b in docpages.marked("docs/recordio.md")
                   if b.language == "python" and b.mark is None][:2]
    (tmp_path / "pack.py").write_text(pack)
    (tmp_path / "train_rec.py").write_text(COUNT + train)
    code, _, err, _ = docpages.shell("python pack.py", tmp_path)
    assert code == 0, err
    [command] = docpages.commands(docpages.block("docs/recordio.md", "gluondist launch"))
    code, out, err, _ = docpages.shell(command, tmp_path)
    assert code == 0, err
    [accuracy] = re.findall(r"^\[worker 0\] val_accuracy ([\d.]+)$", out, re.M)
    assert float(accuracy) > 0.75, out  # 0.1 by chance
    assert "[worker 1] val_accuracy" not in out

    reads = collections.defaultdict(collections.Counter)
    for line in (tmp_path / "reads.log").read_text().splitlines():
        rank, name, idx = line.split()
        reads[rank, name][int(idx)] += 1
    first = collections.Counter(range(64))  # fit's check of one batch, on each worker
    for name, length, epochs, shuffle in (("digits-train.rec", 1500, 3, True),
                                          ("digits-val.rec", 297, 3, False)):
        got = [reads[rank, name] - first for rank in ("0", "1")]
        assert all(reads[rank, name] & first == first for rank in ("0", "1"))
        want = [slices(length, r, epochs, shuffle) for r in range(2)]
        assert got in (want, want[::-1]), name  # the kvstore's ranks need not be the launcher's
        assert sum(got, collections.Counter()) == collections.Counter(
            {i: epochs for i in range(length)})
