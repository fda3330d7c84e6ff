"""``python -m rdma``: the rdma command line."""
import sys

from rdma.cli import main

if __name__ == "__main__":
    sys.exit(main())
