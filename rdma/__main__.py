"""``python -m rdma``: the rdma command line (``ibtool``)."""
import sys

if __name__ == "__main__":
    try:
        from rdma.cli import main
        rc = main()
    except KeyboardInterrupt:
        # Ctrl-C while importing rdma.cli: quiet (rdma.cli.main catches
        # it after that), the status Ctrl-C gives
        rc = 130
    sys.exit(rc)
