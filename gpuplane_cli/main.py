"""`gpuplane` (and `kubectl gpuplane`): argument parsing, dispatch, and kubectl's error contract:
messages on stderr, exit 0 on success and 1 on any error, usage errors with a hint to `--help`.

Global flags (`--server`, `--token`, `--config`, `--request-timeout`,
`--insecure-skip-tls-verify`, `-o`) are accepted before or after the command, as kubectl's are.
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn, TextIO

from gpuplane_cli.commands import auth, deploy, explain, get, plans, rollout, savings
from gpuplane_cli.context import Context
from gpuplane_cli.errors import (
    APIError,
    CLIError,
    ConnectionFailed,
    UsageError,
    from_api_error,
    from_connection_failure,
)
from gpuplane_cli.output import FORMATS

COMMANDS = (auth, get, deploy, explain, rollout, plans, savings)
_INVALID_CHOICE = re.compile(r"argument (?:COMMAND|VERB): invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with kubectl's usage errors: ``error: ...`` and a hint, exit 1 (not argparse's 2)."""

    def error(self, message: str) -> NoReturn:
        invalid = _INVALID_CHOICE.search(message)
        if invalid:
            word, choices = invalid.group(1), re.findall(r"'([^']*)'", invalid.group(2))
            text = f'error: unknown command "{word}" for "{self.prog}"'
            close = difflib.get_close_matches(word, choices, n=1)
            if close:
                text += f"\n\nDid you mean this?\n\t{close[0]}\n"
            raise UsageError(f"{text}\nRun '{self.prog} --help' for usage.")
        raise UsageError(f"error: {message}\nSee '{self.prog} --help' for usage.")


def global_flags() -> Parser:
    """The flags every command takes; absent ones stay unset (SUPPRESS), so that a flag given
    before the command is not overwritten by the command's parser."""
    flags = Parser(add_help=False)
    unset = argparse.SUPPRESS
    group = flags.add_argument_group("global flags")
    group.add_argument("-s", "--server", default=unset, help="the server's URL (or GPUPLANE_SERVER)")
    group.add_argument("--token", default=unset, help="an API token (or GPUPLANE_TOKEN)")
    group.add_argument("--config", default=unset, help="the config file (or GPUPLANE_CONFIG; default "
                                                       "~/.config/gpuplane/config)")
    group.add_argument("--request-timeout", type=float, default=unset, help="seconds to wait for an answer (30)")
    group.add_argument("--insecure-skip-tls-verify", action="store_true", default=unset,
                       help="do not check the server's certificate (insecure)")
    group.add_argument("-o", "--output", choices=FORMATS, default=unset,
                       help="table (default), wide, json, yaml or name")
    return flags


def build_parser(prog: str = "gpuplane") -> Parser:
    flags = global_flags()
    parser = Parser(prog=prog, parents=[flags], description="gpuplane's command-line client: talks to the REST API "
                    "with a token. Start with: login SERVER -u USERNAME.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.register(subparsers, [flags])
    return parser


def program_name(argv0: str) -> str:
    """``kubectl gpuplane`` when run as kubectl's plugin (an executable named ``kubectl-gpuplane``)."""
    name = Path(argv0).name
    return "kubectl gpuplane" if name.startswith("kubectl-") else "gpuplane"


def main(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None,
         out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one command; the exit status (0 success, 1 any error, 130 interrupted)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out, err = out or sys.stdout, err or sys.stderr
    prog = program_name(sys.argv[0] if sys.argv else "gpuplane")
    parser = build_parser(prog)
    try:
        if not argv:
            parser.print_help(out)
            return 0
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit_:  # --help
            return int(exit_.code or 0)
        if not getattr(args, "handler", None):
            parser.print_help(out)
            return 0
        ctx = Context(args=args, environ=os.environ if environ is None else environ, out=out, err=err, prog=prog)
        return int(args.handler(ctx) or 0)
    except UsageError as error:
        message = error.message if "--help" in error.message else f"{error.message}\nSee '{prog} --help' for usage."
        err.write(message + "\n")
        return error.exit_code
    except CLIError as error:
        err.write(error.message + "\n")
        return error.exit_code
    except ConnectionFailed as error:
        err.write(from_connection_failure(error).message + "\n")
        return 1
    except APIError as error:  # a command that did not word it itself
        err.write(from_api_error(error).message + "\n")
        return 1
    except KeyboardInterrupt:
        err.write("\n")
        return 130
    except BrokenPipeError:  # `gpuplane get gpus | head`
        return 0
