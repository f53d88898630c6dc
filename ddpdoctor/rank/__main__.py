"""``python -m ddpdoctor.rank RUN_DIR SCRIPT [ARGS...]``: the per-rank bootstrap torchrun starts."""

import sys

from ddpdoctor.rank.bootstrap import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
