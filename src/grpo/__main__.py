from grpo.cli.main import main

raise SystemExit(main())
