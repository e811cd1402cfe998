"""The application layer: one module per `seqlab` command (seqlab.app.main lists them). Commands own the
orchestration (configs in, files and runs out); the library below never imports from here."""
