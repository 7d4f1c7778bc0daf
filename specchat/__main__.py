from specchat.cli import main

raise SystemExit(main())
