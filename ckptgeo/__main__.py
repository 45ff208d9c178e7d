from ckptgeo.cli import main

raise SystemExit(main())
