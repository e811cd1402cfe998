"""`python -m seqlab <command>`: the same as the `seqlab` console script."""

import sys

from seqlab.app.main import main

sys.exit(main())
