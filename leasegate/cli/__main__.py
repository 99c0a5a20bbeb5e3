import sys

from leasegate.cli.commands import main

sys.exit(main())
