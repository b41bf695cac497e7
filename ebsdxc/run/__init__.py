"""The run: planning, streaming, the per-batch pipeline, executors and the entry points.

``process`` correlates a scan against its references into a results file; ``strain`` adds
the HR-EBSD strain pass to an existing one. The modules, one job each:

``planning``   which points, which tasks and batches, halo rows, batch size
``streaming``  the reader thread, pinned host buffers, CUDA streams
``pipeline``   the per-batch stage pipeline (preprocess, tiles, engine, references)
``tasks``      a job and its tasks, and the one task function every executor runs
``executors``  inline and thread-pool executors (Dask: :class:`ebsdxc.cluster.DaskExecutor`)
``inputs``     references and static background read once for the whole run
``output``     where results go and what must not be overwritten
"""

from .executors import Executor, InlineExecutor, ThreadExecutor
from .output import default_output
from .pipeline import Pipeline
from .process import process
from .strain import strain

__all__ = ["Executor", "InlineExecutor", "Pipeline", "ThreadExecutor", "default_output", "process", "strain"]
