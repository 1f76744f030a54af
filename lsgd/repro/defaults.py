"""The reproductions' settings, as ``lsgd repro`` offers them: torch-free, so that the
command line can show and check them before it imports the experiments."""

from __future__ import annotations

#: The 2-D landscape (:mod:`lsgd.repro.toy`): the step, LGD's pull, EAGD's moving rate.
TOY_LR = 0.1
TOY_PULL = 0.1
TOY_MOVING_RATE = 0.43

#: Low-rank matrix factorization (:mod:`lsgd.repro.matrix`): d, the ranks r, the
#: trials per rank, the workers, the step eta, the paper's lambda (the strategies get
#: eta * lambda), the iterations, and the engines that compute it.
MATRIX_DIM = 1000
MATRIX_RANKS = (1, 10, 50, 100)
MATRIX_TRIALS = 10
MATRIX_WORKERS = 8
MATRIX_LR = 5e-4
MATRIX_PULL = 0.2
MATRIX_STEPS = 300
ENGINES = ("batched", "strategy")
