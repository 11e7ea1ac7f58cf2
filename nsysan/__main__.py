import sys

from nsysan.cli import main

sys.exit(main())
