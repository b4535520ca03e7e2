# SPDX-License-Identifier: MIT
"""The bash completions of usmc-run and usmc, as bash-completion loads them:
every option and subcommand the programs' --help lists is offered (so the
completions cannot fall behind the programs), and the values some options
take (files, directories, processes, the wrapped program) are completed."""
import os
import re
import subprocess

from harness import check

BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"

# Completes the command line $2 with the cursor at its end, as readline would
# call the completion of its first word (loaded from $1 as bash-completion's
# loader does), and prints the candidates one a line.
DRIVER = r"""
source /usr/share/bash-completion/bash_completion
source "$1"
line=$2
read -ra COMP_WORDS <<<"$line"
[[ $line == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE=$line
COMP_POINT=${#line}
func=$(complete -p "${COMP_WORDS[0]}" | sed -E 's/.* -F ([^ ]+) .*/\1/')
"$func" "${COMP_WORDS[0]}" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


def complete(script, line, env=None):
    # compopt complains outside a real completion (stderr): only the
    # candidates matter here.
    r = subprocess.run(["bash", "-c", DRIVER, "complete", script, line], capture_output=True,
                       text=True, timeout=30, env=env)
    return set(r.stdout.split())


def help_options(text):
    """The options a --help lists: on the lines that start with one, the
    names before the description (`-p,--pid UINT  only ...`, `-r <SIZE>`)."""
    found = set()
    for line in text.splitlines():
        if re.match(r"\s+-", line):
            head = re.split(r"(?<=\S)\s{2,}", line.strip(), maxsplit=1)[0]
            found |= set(re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", head))
    return found


def help_subcommands(text):
    """CLI11's `Subcommands:` section: one name a line (aliases after it,
    "linkgroup, lgr"), then its description."""
    names, inside = set(), False
    for line in text.splitlines():
        if line.strip() == "Subcommands:":
            inside = True
        elif inside and line.strip():
            names.add(line.split()[0].rstrip(","))
        elif inside:
            inside = False
    return names


def completion_checks(completions_dir, usmc_run, usmc, example_config, env):
    run_script = os.path.join(completions_dir, "usmc-run")
    usmc_script = os.path.join(completions_dir, "usmc")
    for script in (run_script, usmc_script):
        r = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
        check(r.returncode == 0, f"bash -n {script}")
    if not check(os.path.exists(BASH_COMPLETION), f"{BASH_COMPLETION} is there (scripts/install-deps.sh)"):
        return

    # usmc-run: its options, then the wrapped program's command line.
    want = help_options(subprocess.run([usmc_run, "--help"], capture_output=True, text=True,
                                       env=env).stdout)
    got = complete(run_script, "usmc-run -")
    check(want and want <= got, f"usmc-run -<TAB> offers every option of --help (missing {sorted(want - got)})")
    got = complete(run_script, f"usmc-run --config {os.path.dirname(example_config)}/")
    check(example_config in got, f"usmc-run --config <TAB> offers files ({sorted(got)[:5]})")
    for line in ("usmc-run pytho", "usmc-run --smcd -r 64k pytho", "usmc-run -- pytho"):
        got = complete(run_script, line)
        check("python3" in got, f"{line}<TAB> offers commands ({sorted(got)[:5]})")
    got = complete(run_script, "usmc-run --tcp -- usmc-run --sm")
    check(got == {"--smcd", "--smcr"}, f"the wrapped program's own completion ({sorted(got)})")

    # usmc: each subcommand's options, down the tree --help shows.
    def walk(path):
        if not check(len(path) <= 3, f"usmc's subcommands nest at most 3 deep ({path})"):
            return
        text = subprocess.run([usmc, *path, "--help"], capture_output=True, text=True, env=env).stdout
        subs = help_subcommands(text)
        line = " ".join(["usmc", *path]) + " "
        if subs:
            got = complete(usmc_script, line)
            check(subs <= got, f"{line}<TAB> offers the subcommands of --help (missing {sorted(subs - got)})")
        want = help_options(text)
        got = complete(usmc_script, line + "-")
        check(want and want <= got, f"{line}-<TAB> offers every option of --help (missing {sorted(want - got)})")
        for sub in sorted(subs):
            walk([*path, sub])

    walk([])
    got = complete(usmc_script, "usmc limit-hs ")
    check(got == {"enable", "disable", "show"}, f"usmc limit-hs <TAB> offers its actions ({sorted(got)})")
    got = complete(usmc_script, f"usmc config check {os.path.dirname(example_config)}/")
    check(example_config in got, f"usmc config check <TAB> offers files ({sorted(got)[:5]})")
    got = complete(usmc_script, "usmc --stats-dir /us")
    check("/usr" in got, f"usmc --stats-dir <TAB> offers directories ({sorted(got)})")


def live_process_completion(completions_dir, pid, name, env):
    """`usmc stats -p`/`-n` offer the processes that publish stats."""
    script = os.path.join(completions_dir, "usmc")
    got = complete(script, "usmc stats -p ", env=env)
    check(str(pid) in got, f"usmc stats -p <TAB> offers the running usmc process {pid} ({sorted(got)})")
    got = complete(script, "usmc stats --name ", env=env)
    check(name in got, f"usmc stats --name <TAB> offers its name {name} ({sorted(got)})")
