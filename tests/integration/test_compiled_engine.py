"""engine=seqlab_compiled through `seqlab translate`, one line a call (chunk_size=1, as a stream is read): the
lines the default engine translates, greedy (the model's own one-row program) and beam (the oneDNN copy's)."""

from __future__ import annotations

import io

import pytest
import torch

from seqlab.app.translate import run_translate

LINES = "En el principio creó Dios los cielos y la tierra.\n\nDios\nY la tierra estaba desordenada y vacía.\n"


@pytest.mark.parametrize("decoding", ["greedy", "beam"])
def test_translate_one_line_a_call_with_the_compiled_step(make_cfg, smoke_checkpoint, decoding):
    outs = []
    # Inductor's caches off: compiled as on a fresh machine
    with torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False):
        for engine in ("seqlab", "seqlab_compiled"):
            out = io.StringIO()
            n = run_translate(make_cfg("translate", [f"ckpt={smoke_checkpoint}", f"decoding={decoding}",
                                                     "decoding.max_length=12", "chunk_size=1", f"engine={engine}"]),
                              stdin=io.StringIO(LINES), stdout=out)
            assert n == 4
            outs.append(out.getvalue().splitlines())
    assert len(outs[0]) == 4 and outs[0] == outs[1]


def test_translate_one_line_a_call_with_the_compiled_int8_step(make_cfg, smoke_checkpoint):
    """precision=int8: the compiled step of the int8 copy translates each line as the eager int8 engine does."""
    outs = []
    with torch._inductor.config.patch(fx_graph_cache=False, autotune_local_cache=False):
        for engine in ("seqlab", "seqlab_compiled"):
            out = io.StringIO()
            n = run_translate(make_cfg("translate", [f"ckpt={smoke_checkpoint}", "precision=int8", "chunk_size=1",
                                                     "decoding.max_length=12", f"engine={engine}"]),
                              stdin=io.StringIO(LINES), stdout=out)
            assert n == 4
            outs.append(out.getvalue().splitlines())
    assert len(outs[0]) == 4 and outs[0] == outs[1]
