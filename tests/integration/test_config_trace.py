"""One `seqlab evaluate` call's configuration, followed through the code (tests/config_trace.py): the raw
config is read by the application layer only, and the typed setting built from it never comes back, down a
call chain, to a package it had left."""

from __future__ import annotations

from seqlab.app.evaluate import run_evaluation
from tests.config_trace import WITH_CHECKPOINT, trace_config


def test_the_raw_config_stays_in_the_application_layer(make_cfg, smoke_checkpoint):
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=none", "limit=4", "decoding.max_length=4",
                            "n_bootstrap=20", "score_references=false"])
    payload, trace = trace_config(lambda: run_evaluation(cfg))
    assert payload["status"] == "ok"
    assert trace.raw and {call.split(".")[1] for call in trace.raw} == {"app"}
    assert {"inference", "decoding", "tracking"} <= set(trace.packages)  # the typed setting travels on
    assert trace.nested_returns == 0, [(c, chain) for c, chain in zip(trace.calls, trace.chains, strict=True)
                                       if chain[-1] in chain[:-2]]


def test_the_whole_configuration_comes_back_to_a_package_at_most_30_times(make_cfg, smoke_checkpoint):
    """With the checkpoint's model and data configs and a W&B run (offline): the configuration is typed once,
    the decoding's derived values computed once, the record and the W&B config written from one description.
    The same evaluation's configuration came back 61 times before (this test's bound is half of that)."""
    cfg = make_cfg("eval", [f"ckpt={smoke_checkpoint}", "logger=wandb", "logger.mode=offline", "limit=4",
                            "decoding.max_length=4", "n_bootstrap=20", "score_references=false"])
    payload, trace = trace_config(lambda: run_evaluation(cfg), WITH_CHECKPOINT)
    assert payload["status"] == "ok"
    assert {"model", "data", "checkpoint", "tracking"} <= set(trace.packages)  # the checkpoint's configs are followed
    assert trace.returns <= 30, " -> ".join(trace.packages)


def test_the_trace_counts_returns_in_call_order_and_down_a_chain():
    from tests.config_trace import ConfigTrace

    trace = ConfigTrace(calls=["seqlab.app.a", "seqlab.data.b", "seqlab.app.c", "seqlab.app.d", "seqlab.data.e"],
                        chains=[("app",), ("app", "data"), ("app",), ("app", "app"), ("app", "data", "app", "data")])
    assert trace.packages == ["app", "data", "app", "data"] and trace.returns == 2
    assert trace.nested_returns == 1  # data -> app -> data down the last chain
