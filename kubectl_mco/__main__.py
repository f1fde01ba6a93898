import sys

from kubectl_mco.cli import main

sys.exit(main())
