"""`aoscale COMMAND [ARGS...]`: one command for every entry point (the console script).

Each subcommand is an existing command line's `main(argv)`, loaded only when it is chosen, so
`aoscale status` starts without torch. The `python -m` forms keep working unchanged.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from cli import EXIT_BAD_INPUT

# subcommand -> (module whose `main(argv)` it runs, what it does)
COMMANDS: dict[str, tuple[str, str]] = {
    "launch": ("scaling.launch", "plan, train, evaluate and report a study (python -m scaling.launch)"),
    "prepare": ("scaling.prepare", "tokenise a study's corpora into its token cache before any run "
                "(python -m scaling.prepare)"),
    "status": ("scaling.status", "every run of a study by state (python -m scaling.status)"),
    "fit": ("analysis.fit_curves", "fit scaling curves and write the report (python -m analysis.fit_curves)"),
    "train": ("jobs.train.loop", "train or resume one run (python -m jobs.train)"),
    "evaluate": ("jobs.eval.evaluate", "evaluate one trained run (python -m jobs.eval.evaluate)"),
    "generate": ("jobs.eval.generate", "sample from one run and score the samples (python -m jobs.eval.generate)"),
}


def usage() -> str:
    """The command list `aoscale --help` prints."""
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return ("usage: aoscale COMMAND [ARGS...]   (aoscale COMMAND --help for its flags)\n\ncommands:\n"
            + "\n".join(lines))


def main(argv: Sequence[str] | None = None) -> int:
    """Run `aoscale COMMAND ARGS...`: the command's own exit status; --help lists the commands;
    no command or an unknown one is one line on stderr and status 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not args or args[0] not in COMMANDS:
        given = f"unknown command {args[0]!r}" if args else "no command given"
        print(f"aoscale: {given}; choose one of {', '.join(COMMANDS)}; see --help", file=sys.stderr)
        return EXIT_BAD_INPUT
    module = importlib.import_module(COMMANDS[args[0]][0])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
