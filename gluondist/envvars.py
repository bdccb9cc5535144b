"""Names of every environment variable gluondist reads or sets, in one place.

The ``DMLC_*`` and ``PS_*`` names are ps-lite's (MXNet's parameter server); the ``GLUONDIST_*``
names are ours, set by the launcher for the processes it starts.
"""

DMLC_ROLE = "DMLC_ROLE"  # scheduler | server | worker
DMLC_PS_ROOT_URI = "DMLC_PS_ROOT_URI"  # scheduler address the others connect to
DMLC_PS_ROOT_PORT = "DMLC_PS_ROOT_PORT"
DMLC_NUM_WORKER = "DMLC_NUM_WORKER"
DMLC_NUM_SERVER = "DMLC_NUM_SERVER"
DMLC_NODE_HOST = "DMLC_NODE_HOST"  # address this node binds and advertises
DMLC_INTERFACE = "DMLC_INTERFACE"
DMLC_USE_KUBERNETES = "DMLC_USE_KUBERNETES"  # makes the scheduler bind 0.0.0.0
PS_VERBOSE = "PS_VERBOSE"
# ps-lite binds a worker or server to this port when set; on one host it hands out ranks
# in ascending port order, which is how the launcher makes `worker r` equal `kv.rank == r`.
PS_PORT = "PORT"

OMP_NUM_THREADS = "OMP_NUM_THREADS"
CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
MXNET_CPU_WORKER_NTHREADS = "MXNET_CPU_WORKER_NTHREADS"
# Operations MXNet runs as one in backward (15 by default; 0: each on its own, so that each
# gradient is ready, and pushed, as soon as it is made: see launcher/roles.worker_defaults),
# and in both passes, which the backward setting falls back to
MXNET_BULK_BACKWARD = "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN_BWD"
MXNET_BULK = "MXNET_EXEC_BULK_EXEC_MAX_NODE_TRAIN"
# Arrays of at least this many elements are sliced over every server (1,000,000 by default)
MXNET_KVSTORE_BIGARRAY_BOUND = "MXNET_KVSTORE_BIGARRAY_BOUND"

GLUONDIST_RANK = "GLUONDIST_RANK"  # the launcher's rank for this worker
GLUONDIST_KVSTORE = "GLUONDIST_KVSTORE"  # what kvstore='auto' means inside a launched job
# Bytes per kvstore chunk of a big gradient in sync modes (gluondist.kvstore.CHUNK_BYTES; 0: whole)
GLUONDIST_CHUNK_BYTES = "GLUONDIST_CHUNK_BYTES"
# Chunks a worker has pushed to each server and not yet pulled back, at most
# (gluondist.kvstore.CHUNKS_IN_FLIGHT; 0: no bound)
GLUONDIST_CHUNKS_IN_FLIGHT = "GLUONDIST_CHUNKS_IN_FLIGHT"
# Bytes of small whole gradients sent together on one key in dist_sync (gluondist.kv.fusion;
# default: the chunk size; 0: each on its own)
GLUONDIST_FUSE_BYTES = "GLUONDIST_FUSE_BYTES"
# 1 (default): each chunk of a gradient updated as its sum comes back; 0: after the last pull
GLUONDIST_CHUNK_UPDATES = "GLUONDIST_CHUNK_UPDATES"
# The share (0 to 1) of the chunked bytes of a dist_sync step sent in backward's order, the rest
# in forward order (gluondist.kv.order; 1: backward's order throughout; default: the job's choice)
GLUONDIST_BACKWARD_SHARE = "GLUONDIST_BACKWARD_SHARE"
# 1: run on an MXNet other than the one gluondist was tested with (gluondist.MXNET_SUPPORTED),
# with a warning, where it is refused otherwise
GLUONDIST_UNTESTED_MXNET = "GLUONDIST_UNTESTED_MXNET"
GLUONDIST_RESTART_COUNT = "GLUONDIST_RESTART_COUNT"  # 0 on the first attempt, then 1, 2, ...
# Set by the launcher for a worker's process only when stall detection is on: the number of an
# inherited pipe's write end, on which gluondist.heartbeat reports finished batches.
GLUONDIST_PROGRESS_FD = "GLUONDIST_PROGRESS_FD"
# Where the worker bootstrap records an uncaught exception (JSON) for the launcher to read.
GLUONDIST_ERROR_FILE = "GLUONDIST_ERROR_FILE"
# Seconds a failing worker's bootstrap gives its atexit handlers and file flushes (10).
GLUONDIST_EXIT_GRACE = "GLUONDIST_EXIT_GRACE"
JOB_COMPLETION_INDEX = "JOB_COMPLETION_INDEX"  # Kubernetes sets it in an Indexed Job's pods
PYTHONUNBUFFERED = "PYTHONUNBUFFERED"  # workers' output reaches the launcher line by line
# Slurm's, read by --launcher slurm inside an allocation
SLURM_JOB_ID = "SLURM_JOB_ID"
SLURM_JOB_NODELIST = "SLURM_JOB_NODELIST"
SLURM_TASKS_PER_NODE = "SLURM_TASKS_PER_NODE"

# What `gluondist launch` reads for its options when they are not on the command line (a
# cluster's environment), one per option; GLUONDIST_KVSTORE above doubles as --kvstore's.
GLUONDIST_NUM_WORKERS = "GLUONDIST_NUM_WORKERS"
GLUONDIST_NUM_SERVERS = "GLUONDIST_NUM_SERVERS"
GLUONDIST_LOG_DIR = "GLUONDIST_LOG_DIR"
GLUONDIST_MAX_RESTARTS = "GLUONDIST_MAX_RESTARTS"
GLUONDIST_LAUNCHER = "GLUONDIST_LAUNCHER"
GLUONDIST_HOSTS = "GLUONDIST_HOSTS"
GLUONDIST_SERVER_HOSTS = "GLUONDIST_SERVER_HOSTS"
GLUONDIST_STALL_TIMEOUT = "GLUONDIST_STALL_TIMEOUT"
GLUONDIST_START_TIMEOUT = "GLUONDIST_START_TIMEOUT"
# --env's: space-separated KEY=VALUE pairs (click splits a repeatable option's variable on
# whitespace), read only when no --env is on the command line
GLUONDIST_ENV = "GLUONDIST_ENV"
GLUONDIST_THREADS = "GLUONDIST_THREADS"
GLUONDIST_INTERFACE = "GLUONDIST_INTERFACE"
GLUONDIST_GPUS_PER_WORKER = "GLUONDIST_GPUS_PER_WORKER"
GLUONDIST_SSH_CONFIG = "GLUONDIST_SSH_CONFIG"
GLUONDIST_SCHEDULER_ADDRESS = "GLUONDIST_SCHEDULER_ADDRESS"
GLUONDIST_HOST_DISCOVERY = "GLUONDIST_HOST_DISCOVERY"
GLUONDIST_LINK_TIMEOUT = "GLUONDIST_LINK_TIMEOUT"

# The job's settings: what a user sets for every process of a job, in --env or the launcher's
# own environment, and the processes read. A local or Slurm job's processes inherit them; over
# ssh they travel with the job although the other GLUONDIST_* names stay behind
# (transports/ssh.py). docs/environment.md's "What you can set for a job" lists these.
JOB_SETTINGS = (GLUONDIST_EXIT_GRACE, GLUONDIST_CHUNK_BYTES, GLUONDIST_FUSE_BYTES,
                GLUONDIST_CHUNKS_IN_FLIGHT, GLUONDIST_CHUNK_UPDATES, GLUONDIST_BACKWARD_SHARE,
                GLUONDIST_UNTESTED_MXNET,
                MXNET_KVSTORE_BIGARRAY_BOUND, MXNET_BULK_BACKWARD, MXNET_BULK, PS_VERBOSE,
                OMP_NUM_THREADS)
# ps-lite's own settings (PS_VERBOSE, PS_RESEND, PS_HEARTBEAT_TIMEOUT, ...) are the job's too
JOB_SETTING_PREFIXES = ("PS_",)


def is_job_setting(name: str) -> bool:
    """Whether ``name`` is one of the job's settings (see JOB_SETTINGS)."""
    return name in JOB_SETTINGS or name.startswith(JOB_SETTING_PREFIXES)
