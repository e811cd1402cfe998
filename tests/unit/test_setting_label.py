"""An evaluation setting's one label and its folder's key."""

from __future__ import annotations

from pathlib import Path

from seqlab.app.infer import InferenceRequest
from seqlab.decoding import DecodingConfig
from seqlab.tracking.results import ResultDir


def request(**changes) -> InferenceRequest:
    values = {"command": "eval", "checkpoint": "m.ckpt", "decoding": DecodingConfig(method="beam", num_beams=4),
              "precision": "fp32", "engine": "seqlab", "from_checkpoint": False, **changes}
    return InferenceRequest(**values)


def test_the_label_is_settled_before_anything_loads():
    assert request().label == "beam4_lp1"
    assert request(precision="bf16", engine="ctranslate2").label == "beam4_lp1_bf16_ct2"
    # the checkpoint's own defaults are known only once it loads: the label says where they come from
    assert request(from_checkpoint=True).label == "checkpoint"
    assert request(languages=("en_XX", "ro_RO", None)).label == "beam4_lp1_ro_RO"
    assert request(ensemble=("b.ckpt",)).label == "beam4_lp1_ens2"


def test_the_languages_asked_for_key_the_folder_and_their_absence_keeps_earlier_keys(tmp_path: Path):
    def folder(languages):
        return ResultDir.for_evaluation(tmp_path, "m.ckpt", "beam4_lp1", "test", None, {"method": "beam"}, "fp32",
                                        "seqlab", None, None, languages)

    plain, setting = folder(None)
    assert "languages" not in setting  # a setting without languages keys what earlier code keyed
    to_ro, setting_ro = folder({"tgt_lang": "ro_RO"})
    to_de, _ = folder({"tgt_lang": "de_DE"})
    assert setting_ro["languages"] == {"tgt_lang": "ro_RO"}
    assert len({plain.path, to_ro.path, to_de.path}) == 3
