"""Shell completion for ``ibtool``, generated from its argparse parsers.

::

    python -m rdma.cli.completion bash      # the bash script, on stdout
    python -m rdma.cli.completion zsh       # the zsh one (#compdef ibtool)
    source <(python -m rdma.cli.completion bash)   # use it in this shell

pip installs both with the package (``setup.py``'s data files):
``share/bash-completion/completions/ibtool`` and
``share/zsh/site-functions/_ibtool`` under the installation prefix.  The
copies in ``rdma/cli/data/`` are what is installed;
``tests/host/test_cli_completion.py`` checks that they are what this
module generates from the current parsers, and runs them in bash and zsh.

The scripts are plain data: they complete the command names, each
command's options, the values of options and positionals that have
choices (``--output``, ``pingpong``'s mode), and file names where a
value is a file; they never run Python.
"""
from __future__ import annotations

import sys
from typing import Iterable, List, Optional

from rdma.cli._argspec import (Command, Option, Positional, commands,
                              top_parser)

__all__ = ["bash_script", "zsh_script", "main"]


def _words(items: Iterable[str]) -> str:
    return " ".join(items)


def _bash_values(c: Command) -> List[str]:
    """The ``case $prev in`` arms: what follows an option with a value."""
    arms = []
    for o in c.options:
        if not o.takes_value:
            continue
        pat = "|".join(o.flags)
        if o.choices:
            arms.append(f'                {pat}) COMPREPLY=($(compgen -W '
                        f'"{_words(o.choices)}" -- "$cur")); return ;;')
        elif o.is_file:
            arms.append(f'                {pat}) COMPREPLY=($(compgen -f '
                        f'-- "$cur")); return ;;')
    if any(o.takes_value for o in c.options):
        flags = [f for o in c.options if o.takes_value for f in o.flags]
        arms.append(f"                {'|'.join(flags)}) return ;;")
    return arms


def _bash_positionals(c: Command) -> List[str]:
    """``pos=(...)``: what each positional completes to (``w:WORDS``,
    ``f`` for a file, empty for anything); ``rep=1`` when the last one
    takes any number of words."""
    pos = []
    for p in c.positionals:
        if p.choices:
            pos.append(f'"w:{_words(p.choices)}"')
        elif p.is_file:
            pos.append('"f"')
        else:
            pos.append('""')
    rep = 1 if c.positionals and c.positionals[-1].nargs in (
        "*", "+", "...", "A...") else 0
    return [f"            pos=({' '.join(pos)}); rep={rep}"]


def bash_script() -> str:
    """The bash completion script (defines ``_ibtool``, registers it)."""
    import rdma
    cmds = list(commands())
    _, top = top_parser()
    top_words = [f for o in top.options for f in o.flags]
    out = [
        "# bash completion for ibtool                   -*- shell-script -*-",
        "# Generated from ibtool's argparse definitions by",
        f"# `python -m rdma.cli.completion bash` (rdma {rdma.__version__}); "
        f"do not edit.",
        "_ibtool()",
        "{",
        '    local cur=${COMP_WORDS[COMP_CWORD]}',
        '    local prev=${COMP_WORDS[COMP_CWORD-1]}',
        "    local i w at=0 cmd= opts= vals= pos=() rep=0 n=0",
        "    COMPREPLY=()",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        "        case ${COMP_WORDS[i]} in",
        "            -*) ;;",
        "            *) cmd=${COMP_WORDS[i]}; at=$i; break ;;",
        "        esac",
        "    done",
        '    if [[ -z $cmd ]]; then',
        f'        COMPREPLY=($(compgen -W "{_words(top_words)} '
        f'{_words(c.name for c in cmds)}" -- "$cur"))',
        "        return",
        "    fi",
        "    case $cmd in",
    ]
    for c in cmds:
        out.append(f"        {c.name})")
        arms = _bash_values(c)
        if arms:
            out.append("            case $prev in")
            out.extend(arms)
            out.append("            esac")
        flags = [f for o in c.options for f in o.flags]
        valued = [f for o in c.options if o.takes_value for f in o.flags]
        out.append(f'            opts="{_words(flags)}"')
        out.append(f'            vals=" {_words(valued)} "')
        out.extend(_bash_positionals(c))
        out.append("            ;;")
    out += [
        "        *) return ;;",
        "    esac",
        '    if [[ $cur == -* ]]; then',
        '        COMPREPLY=($(compgen -W "$opts" -- "$cur"))',
        "        return",
        "    fi",
        "    # which positional this word is: count those before it",
        "    for ((i = at + 1; i < COMP_CWORD; i++)); do",
        "        w=${COMP_WORDS[i]}",
        '        if [[ $w == -* ]]; then',
        '            [[ $vals == *" $w "* ]] && ((i++))',
        "        else",
        "            ((n++))",
        "        fi",
        "    done",
        '    if ((n >= ${#pos[@]})); then',
        "        ((rep && ${#pos[@]})) || return",
        "        n=$((${#pos[@]} - 1))",
        "    fi",
        '    case ${pos[n]} in',
        '        w:*) COMPREPLY=($(compgen -W "${pos[n]#w:}" -- "$cur")) ;;',
        '        f) COMPREPLY=($(compgen -f -- "$cur")) ;;',
        "    esac",
        "}",
        "complete -F _ibtool ibtool",
        "",
    ]
    return "\n".join(out)


def _zsh_text(text: str) -> str:
    """*text* fit for a description in brackets inside single quotes:
    no brackets, colons or backslashes (``_arguments`` reads them)."""
    text = text.replace("[", "(").replace("]", ")").replace(":", " -")
    return text.replace("\\", "/").replace("'", "'\\''")


def _zsh_option(o: Option) -> str:
    desc = _zsh_text(o.help.split(". ")[0] if o.help else "")
    excl = f"({' '.join(o.flags)})" if len(o.flags) > 1 else ""
    if not o.takes_value:
        flags = o.flags[0] if len(o.flags) == 1 else \
            "{" + ",".join(o.flags) + "}"
        return f"'{excl}'{flags}'[{desc}]'" if excl else \
            f"'{flags}[{desc}]'"
    action = ""
    if o.choices:
        action = "(" + " ".join(o.choices) + ")"
    elif o.is_file:
        action = "_files"
    meta = _zsh_text(o.metavar.strip("{}").lower())
    spec_flags = [f + ("=" if f.startswith("--") else "+") for f in o.flags]
    flags = spec_flags[0] if len(spec_flags) == 1 else \
        "{" + ",".join(spec_flags) + "}"
    rest = f"[{desc}]:{meta}:{action}"
    return f"'{excl}'{flags}'{rest}'" if excl else f"'{flags}{rest}'"


def _zsh_positional(i: int, p: Positional) -> str:
    action = ""
    if p.choices:
        action = "(" + " ".join(p.choices) + ")"
    elif p.is_file:
        action = "_files"
    meta = _zsh_text(p.name.strip("{}").lower())
    if p.nargs in ("*", "+", "...", "A..."):
        return f"'*:{meta}:{action}'"
    if p.nargs == "?":
        return f"'{i}::{meta}:{action}'"
    return f"'{i}:{meta}:{action}'"


def zsh_script() -> str:
    """The zsh completion function (``#compdef ibtool``)."""
    import rdma
    cmds = list(commands())
    out = [
        "#compdef ibtool",
        "# zsh completion for ibtool, generated from its argparse "
        "definitions by",
        f"# `python -m rdma.cli.completion zsh` (rdma {rdma.__version__}); "
        f"do not edit.",
        "",
        "_ibtool() {",
        "    local curcontext=$curcontext state line ret=1",
        "    local -a commands",
        "    commands=(",
    ]
    for c in cmds:
        out.append(f"        '{c.name}:{_zsh_text(c.summary)}'")
    out += [
        "    )",
        "    _arguments -C \\",
        "        '(- *)'{-h,--help}'[show the help and exit]' \\",
        "        '(- *)--version[print the version and exit]' \\",
        "        '1:command:->command' \\",
        "        '*::argument:->argument' && ret=0",
        "    case $state in",
        "        command)",
        "            _describe -t commands 'ibtool command' commands "
        "&& ret=0 ;;",
        "        argument)",
        "            curcontext=${curcontext%:*:*}:ibtool-$words[1]:",
        "            case $words[1] in",
    ]
    for c in cmds:
        specs = [_zsh_option(o) for o in c.options]
        specs += [_zsh_positional(i, p)
                  for i, p in enumerate(c.positionals, 1)]
        out.append(f"                {c.name})")
        out.append("                    _arguments -s \\")
        for s in specs:
            out.append(f"                        {s} \\")
        out.append("                        && ret=0 ;;")
    out += [
        "            esac ;;",
        "    esac",
        "    return ret",
        "}",
        "",
        '_ibtool "$@"',
        "",
    ]
    return "\n".join(out)


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in (["bash"], ["zsh"]):
        print("usage: python -m rdma.cli.completion bash|zsh",
              file=sys.stderr)
        return 2
    sys.stdout.write(bash_script() if argv[0] == "bash" else zsh_script())
    return 0


if __name__ == "__main__":
    sys.exit(main())
