"""The one runner of seqlab's experiments: a pipeline is stages (seqlab commands) with digests, each result
archived with its outputs and provenance the moment it lands (core: what a pipeline is; run: running one;
commands: each stage a seqlab process, each record committed). The reported experiments are declared in the
repository's `pipelines/`; the architecture study (seqlab.analysis.study_stages) is one of them."""
