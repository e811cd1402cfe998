"""seqlab's decoding engines: its own search on other forms of the model (oneDNN's packed fp32 weights, int8
linear layers, the decoder step replayed as a CUDA graph) and CTranslate2's search on an export of the
checkpoint, each used like `seqlab.decoding.generate` (`engines.choice.make_engine`). The formats they read
(Hugging Face folders, CTranslate2 models) are `seqlab.interop`'s."""
