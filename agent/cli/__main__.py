"""`python -m agent.cli`: the `pivot` command, for a checkout without the console script."""

from agent.cli import main

main()
