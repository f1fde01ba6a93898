"""`python -m rulegen`: the mco-rulegen command."""

import sys

from rulegen.cli import main

sys.exit(main())
