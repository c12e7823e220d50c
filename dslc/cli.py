"""``python -m dslc.cli``: the command line, as the ``dslc`` script runs it (dslc/driver/cli.py)."""
import sys

from dslc.driver.cli import main

if __name__ == "__main__":
    sys.exit(main())
