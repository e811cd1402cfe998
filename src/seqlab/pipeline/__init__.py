"""What seqlab's experiments are made of: a pipeline and its stages (core), each stage a seqlab command in its
own process with each record committed as it lands (commands), what a training stage's record says
(training). The one runner that runs them is seqlab.app.runner (it composes each stage's config as the
commands do); the reported experiments are declared in the repository's `pipelines/`, the architecture
study's stages by seqlab.analysis.study_stages."""
