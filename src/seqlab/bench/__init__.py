"""Speed and memory against the peers (`seqlab bench`): the training step and decoding against Hugging Face and
CTranslate2 (run: the measurements, speed: the timed parts, result: the typed record), at the pretrained
families' shapes (families, causal), for seqlab's decoding features (features), training levers (levers) and
trained checkpoints (checkpoints). Measuring only: nothing here is used by the pipeline it measures."""
