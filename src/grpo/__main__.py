from grpo.cli import main

raise SystemExit(main())
