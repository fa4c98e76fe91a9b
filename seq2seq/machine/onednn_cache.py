"""oneDNN's primitive cache for training, set before torch loads (oneDNN reads it once).

oneDNN keeps a built kernel, with its buffers, for each matmul shape it meets, up to 1,024 of them.
bf16 training meets a few dozen shapes; its validation decodes at hundreds more, which the default
keeps for the rest of the run: about 0.3 GiB of the trainer on a 2-core Xeon, at no speed gain
(record ``memory-xeon-bf16-onednn-cache-10min-paired``). A value already set wins.
"""

import os

VARIABLE = "ONEDNN_PRIMITIVE_CACHE_CAPACITY"
TRAINING_CAPACITY = 64  # kernels kept: the training shapes, not every validation shape too


def primitive_cache(environ: dict[str, str]) -> dict[str, str]:
    """The setting to add to ``environ``: none where the user chose a capacity."""
    return {} if VARIABLE in environ else {VARIABLE: str(TRAINING_CAPACITY)}


os.environ.update(primitive_cache(dict(os.environ)))
