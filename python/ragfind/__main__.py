import sys

from ragfind.cli import main

sys.exit(main())
