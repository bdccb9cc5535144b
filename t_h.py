from common import *
from mxnet.gluon.data import ArrayDataset, DataLoader, SimpleDataset
for s in [2**31-1, 2**31, -1, True, np.int64(3), 1.0, "3"]:
    tryit("seed %r"%(s,), lambda: gluondist.fit(mk(),(X,y),epochs=1,seed=s).history['loss'])
class DS(gluon.data.Dataset):
    def __len__(self): return 200
    def __getitem__(self,i): return X[i]+np.random.randn(10).astype('f'), y[i]
def tdl():
    out=[]
    for _ in range(2):
        n=mk(); gluondist.fit(n,DataLoader(DS(),batch_size=32,num_workers=0),epochs=2,seed=0); out.append(params(n))
    return rel(out[0],out[1])
tryit("seed DL num_workers=0 numpy transform", tdl)
# seed=None: does fit touch numpy global state?
np.random.seed(5); a=np.random.rand(); np.random.seed(5); gluondist.fit(mk(),(X,y),epochs=1); b=np.random.rand(); print("[seed None leaves np RNG]", a==b)
# mx random transform via Dataset
class DSM(gluon.data.Dataset):
    def __len__(self): return 200
    def __getitem__(self,i): return X[i]+mx.nd.random.normal(shape=(10,)).asnumpy(), y[i]
def tmx():
    out=[]
    for _ in range(2):
        n=mk(); gluondist.fit(n,DSM(),epochs=2,seed=0); out.append(params(n))
    return rel(out[0],out[1])
tryit("seed mx transform", tmx)
# resume in a fresh process is covered by subprocess
