from grpo.tools.cli import main

raise SystemExit(main())
