"""Measuring and comparing: paired significance (compare, pairs), the architecture study (study: variants,
recipes, archive; study_questions: the questions; study_tables, study_claims, study_lengths: their tables and
verdicts; study_stages: the study as a pipeline's stages); speed against the peers is seqlab.bench's."""
